"""The LSTM's returned (h, c) is stored on the module and fed into the next batch, so the next backward runs into the previous batch's freed graph.

source: https://github.com/sgadgil6/cnslab_fmri/issues/4
symptom: error
rule: ?
shape: RNN with hidden state kept on the nn.Module across training batches (LSTM + linear + sigmoid, BCE, Adam)
"""
import torch
import torch.nn as nn

torch.manual_seed(0)
device = torch.device('cpu')


class fMRI_LSTM(nn.Module):
    def __init__(self, hidden_dim, input_dim):
        super(fMRI_LSTM, self).__init__()
        self.hidden_dim = hidden_dim
        self.lstm = nn.LSTM(input_dim, hidden_dim, num_layers=1, batch_first=True)
        self.linear = nn.Linear(hidden_dim, 1)
        self.hidden = self.init_hidden()
        self.dropout = nn.Dropout(p=0.2)
        self.activate = nn.Sigmoid()

    def init_hidden(self):
        return (torch.randn(1, 4, self.hidden_dim).to(device), torch.randn(1, 4, self.hidden_dim).to(device))

    def forward(self, x):
        lstm_out, self.hidden = self.lstm(x)  # here ,you don't need to pass hidden layer state
        lstm_out = lstm_out.squeeze()[:, -1, :]
        out = self.dropout(lstm_out)
        linear_output = self.linear(out)
        final_output = self.activate(linear_output)
        return final_output


model = fMRI_LSTM(hidden_dim=8, input_dim=5)
loss_function = nn.BCELoss()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
batches = [(torch.randn(4, 6, 5), torch.randint(0, 2, (4, 1)).float()) for _ in range(4)]

for epoch in range(2):
    for x, y in batches:
        model.zero_grad()
        pred = model(x)
        loss = loss_function(pred, y)
        loss.backward()
        grad_norm = torch.cat([p.grad.flatten() for p in model.parameters()]).norm()
        optimizer.step()

print("loss", round(loss.item(), 4))
print("grad norm", round(grad_norm.item(), 4))
print("lstm weight_hh grad norm", round(model.lstm.weight_hh_l0.grad.norm().item(), 4))
