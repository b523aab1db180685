import torch
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
data = TensorDataset(torch.randn(16, 4), torch.randn(16, 1))
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
if __name__ == "__main__":
    for x, y in DataLoader(data, batch_size=4, num_workers=2):
        optimizer.zero_grad()
        h = torch.relu(model(x))
        h.mul_(2)  # GF204: relu saved h
        loss = ((h - y) ** 2).mean()
        loss.backward()
