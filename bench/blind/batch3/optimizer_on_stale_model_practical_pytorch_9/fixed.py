"""The char-RNN script builds the optimizer from the first RNN instance and then instantiates the RNN a second time before training, so optimizer.step() updates the discarded model and the trained one never changes.

source: https://github.com/spro/practical-pytorch/issues/9
symptom: no-training
rule: ?
shape: char-RNN classification script: RNN nn.Module, global model and optimizer, train(category, line) step function called in a loop
"""
import torch
import torch.nn as nn

torch.manual_seed(0)
n_letters, n_hidden, n_categories = 10, 12, 3


class RNN(nn.Module):
    def __init__(self, input_size, hidden_size, output_size):
        super().__init__()
        self.hidden_size = hidden_size
        self.i2h = nn.Linear(input_size + hidden_size, hidden_size)
        self.i2o = nn.Linear(input_size + hidden_size, output_size)
        self.softmax = nn.LogSoftmax(dim=1)

    def forward(self, input, hidden):
        combined = torch.cat((input, hidden), 1)
        return self.softmax(self.i2o(combined)), self.i2h(combined)

    def init_hidden(self):
        return torch.zeros(1, self.hidden_size)


rnn = RNN(n_letters, n_hidden, n_categories)
criterion = nn.NLLLoss()
learning_rate = 0.005


def train(category_tensor, line_tensor):
    hidden = rnn.init_hidden()
    optimizer.zero_grad()
    for i in range(line_tensor.size(0)):
        output, hidden = rnn(line_tensor[i], hidden)
    loss = criterion(output, category_tensor)
    loss.backward()
    optimizer.step()
    return output, loss.item()


rnn = RNN(n_letters, n_hidden, n_categories)
optimizer = torch.optim.Adam(rnn.parameters(), lr=learning_rate)
w0 = rnn.i2o.weight.detach().clone()
data = [(torch.randint(0, 3, (1,)), torch.eye(n_letters)[torch.randint(0, n_letters, (5,))].unsqueeze(1)) for _ in range(6)]
for it in range(3):
    for category_tensor, line_tensor in data:
        output, loss = train(category_tensor, line_tensor)

print("loss", round(loss, 4))
print("i2o_change", round((rnn.i2o.weight - w0).norm().item(), 4))
print("i2o_grad", round(rnn.i2o.weight.grad.norm().item(), 4))
