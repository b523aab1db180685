"""Linear layers constructed inside forward(): list(model.parameters()) is empty, and each call draws fresh random weights that never train

source: https://github.com/pytorch/pytorch/issues/1291
symptom: no-training
rule: GF108
shape: nn.Module (ThreeLayerNet) building torch.nn.Linear(...) inline in forward
"""
import torch

D_in, H, D_out = 20, 10, 2


class ThreeLayerNet(torch.nn.Module):
  def __init__(self, D_in, H, D_out):
    super(ThreeLayerNet, self).__init__()

  def forward(self, x):
    h_relu = torch.nn.Linear(D_in, H)(x).clamp(min=0)  # bench: bug
    h_relu = torch.nn.Linear(H, H)(h_relu).clamp(min=0)  # bench: bug
    y_pred = torch.nn.Linear(H, D_out)(h_relu)  # bench: bug
    return y_pred


torch.manual_seed(0)
model = ThreeLayerNet(D_in, H, D_out)
print("parameters:", len(list(model.parameters())))
