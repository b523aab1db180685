"""Linear layers constructed inside forward(): list(model.parameters()) is empty, and each call draws fresh random weights that never train

source: https://github.com/pytorch/pytorch/issues/1291
symptom: no-training
rule: none
shape: nn.Module (ThreeLayerNet) building torch.nn.Linear(...) inline in forward
wrong: other
why: creates the layers lazily on the first forward, so they are not parameters when the model is built and an optimizer made before that call gets none of them
"""
import torch

D_in, H, D_out = 20, 10, 2


class ThreeLayerNet(torch.nn.Module):
  def __init__(self, D_in, H, D_out):
    super(ThreeLayerNet, self).__init__()

  def forward(self, x):
    if not hasattr(self, "linear1"):
      self.linear1 = torch.nn.Linear(D_in, H)
      self.linear2 = torch.nn.Linear(H, H)
      self.linear3 = torch.nn.Linear(H, D_out)
    h_relu = self.linear1(x).clamp(min=0)
    h_relu = self.linear2(h_relu).clamp(min=0)
    y_pred = self.linear3(h_relu)
    return y_pred


torch.manual_seed(0)
model = ThreeLayerNet(D_in, H, D_out)
print("parameters:", len(list(model.parameters())))
