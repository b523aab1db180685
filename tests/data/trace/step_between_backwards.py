import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
out = model(torch.randn(3, 4))
first, second = out.sum(), (out**2).sum()
first.backward(retain_graph=True)
optimizer.step()  # GF204: changes the weight the graph saved
second.backward()
