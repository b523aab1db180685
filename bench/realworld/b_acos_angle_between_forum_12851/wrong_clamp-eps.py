"""Angle between two vectors as a cost: clamp(-1, 1).acos() gives nan gradients when the vectors are aligned

source: https://discuss.pytorch.org/t/numerically-stable-acos-dot-product-derivative/12851
symptom: nan-grad
rule: none
shape: helper functions unit_vector / angle_between used in a loss
wrong: clamp-eps
why: clamps with a large margin, so every angle under about 8 degrees is reported as 8 degrees and gets zero gradient
"""
import torch

eps = 1e-2

def unit_vector(vector):
    return vector / vector.norm()

def angle_between(vector0, vector1):
    unit_vector0 = unit_vector(vector0)
    unit_vector1 = unit_vector(vector1)
    return unit_vector0.dot(unit_vector1).clamp(-1.0 + eps, 1.0 - eps).acos()

prediction = torch.tensor([3.0, 4.0, 0.0], requires_grad=True)
target = torch.tensor([3.0, 4.0, 0.0])
cost = angle_between(prediction, target)
cost.backward()
print(round(cost.item(), 4))
print(prediction.grad)
