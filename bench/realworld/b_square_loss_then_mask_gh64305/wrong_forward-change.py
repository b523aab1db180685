"""Multi-output regression with missing (nan) targets: masking the per-output loss after computing it leaves nan in the weight gradient

source: https://github.com/pytorch/pytorch/issues/64305
symptom: nan-grad
rule: GF301
shape: nn.Linear model, custom loss_fn helper, mask applied to the loss output
wrong: forward-change
why: replaces the nan target by 0 and drops the mask, so the missing label becomes a real target of 0 and the loss trains that output towards it
"""
import torch

torch.manual_seed(0)

m = torch.nn.Linear(1, 2, bias = False)

x = torch.tensor([[0.0]])
y = torch.tensor([[float('nan'), 0.0]])
y_mask = ~torch.isnan(y)
y_pred = m(x)

def loss_fn(y_pred, y):
	# problem shows up when using l2 or log loss (but not l1)
	return torch.square(y_pred - y)

# (2) mask before loss_fn
# masking the inputs keeps the grad finite
l = loss_fn(y_pred, torch.nan_to_num(y))

# loss is fine: no NaNs
print("loss:", l)
assert not torch.any(torch.isnan(l))

l.sum().backward()

# grad should not have NaNs
print("weight grad:", m.weight.grad)
print("grad has nan:", bool(torch.any(torch.isnan(m.weight.grad))))
