import torch


class Cell(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = torch.nn.GRU(2, 3)

    def forward(self, x, h):
        out, h = self.rnn(x, h)  # an op that returns a tuple, inside forward
        return out.sum(), h


cell = Cell()
h = None
for _ in range(3):
    loss, h = cell(torch.randn(4, 1, 2), h)  # the state carries the graph to the next step
    loss.backward()
