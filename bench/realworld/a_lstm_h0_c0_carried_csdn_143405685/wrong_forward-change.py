"""LSTM language model passes (h0, c0) returned by the previous batch into the next one, across backward calls

source: https://blog.youkuaiyun.com/windhawk_fly/article/details/143405685
symptom: error
rule: GF401
shape: nested epoch/batch training loop, `output, (h0, c0) = lstm(batch[0], h0, c0)` with the state created once per epoch
wrong: forward-change
why: resets the carried state to zeros after every batch instead of detaching it, so the next batch no longer starts from the previous hidden state
"""
import torch
import torch.nn as nn

torch.manual_seed(0)
EPOCH = 2
num_layers, batch_size, hidden_dim, embedding_dim, seq_len = 1, 4, 8, 6, 5


class LSTMModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(embedding_dim, hidden_dim, num_layers, batch_first=True)
        self.fc = nn.Linear(hidden_dim, embedding_dim)

    def forward(self, x, h0, c0):
        out, (h, c) = self.lstm(x, (h0, c0))
        return self.fc(out), (h, c)


lstm = LSTMModel()
loss_fn = nn.MSELoss()
optimizer = torch.optim.Adam(lstm.parameters(), lr=0.01)
data_loader = [(torch.randn(batch_size, seq_len, embedding_dim), torch.randn(batch_size, seq_len, embedding_dim)) for _ in range(3)]

for epoch in range(EPOCH):
    h0 = torch.randn((num_layers, batch_size, hidden_dim), requires_grad=False)
    c0 = torch.randn((num_layers, batch_size, hidden_dim), requires_grad=False)
    for batch in data_loader:
        optimizer.zero_grad()
        output, (h0, c0) = lstm(batch[0], h0, c0)
        h0, c0 = torch.zeros_like(h0), torch.zeros_like(c0)
        loss = loss_fn(output.reshape(-1, embedding_dim), batch[1].reshape(-1, embedding_dim))
        loss.backward()
        optimizer.step()

print(round(loss.item(), 4), round(h0.norm().item(), 4))
