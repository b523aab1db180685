"""Following detach_module's documented example, the user clones the network, detaches the clone and backpropagates a loss through it; detach_() also turns requires_grad off on every cloned parameter, so the loss has no graph and backward raises "element 0 of tensors does not require grad".

source: https://github.com/learnables/learn2learn/issues/308
symptom: error
rule: ?
shape: meta-learning library helpers (clone_module that clones parameters into a new module, detach_module that detaches them in place) used to fine-tune a detached copy of a network without touching the original
"""
import torch
from torch import nn

torch.manual_seed(0)


def clone_module(module, memo=None):
    if memo is None:
        memo = {}
    if not isinstance(module, nn.Module):
        return module
    clone = module.__new__(type(module))
    clone.__dict__ = module.__dict__.copy()
    clone._parameters = clone._parameters.copy()
    clone._buffers = clone._buffers.copy()
    clone._modules = clone._modules.copy()
    for param_key in module._parameters:
        if module._parameters[param_key] is not None:
            param = module._parameters[param_key]
            if param.data_ptr() in memo:
                clone._parameters[param_key] = memo[param.data_ptr()]
            else:
                cloned = param.clone()
                clone._parameters[param_key] = cloned
                memo[param.data_ptr()] = cloned
    for module_key in clone._modules:
        clone._modules[module_key] = clone_module(module._modules[module_key], memo=memo)
    return clone


def detach_module(module):  # bench: bug
    for param_key in module._parameters:
        if module._parameters[param_key] is not None:
            module._parameters[param_key].detach_()
    for buffer_key in module._buffers:
        if module._buffers[buffer_key] is not None and module._buffers[buffer_key].requires_grad:
            module._buffers[buffer_key] = module._buffers[buffer_key].detach_()
    for module_key in module._modules:
        detach_module(module._modules[module_key])


net = nn.Sequential(nn.Linear(20, 10), nn.ReLU(), nn.Linear(10, 2))
X = torch.randn(8, 20)
y = torch.randint(0, 2, (8,))
loss = nn.CrossEntropyLoss()

clone = clone_module(net)
detach_module(clone)  # bench: bug
error = loss(clone(X), y)
error.backward()  # gradients are back-propagated on clone, not net


def gnorm(p):
    return None if p.grad is None else round(p.grad.norm().item(), 4)


print("loss", round(error.item(), 4))
print("grad clone layer0", gnorm(clone[0].weight))
print("grad net layer0", gnorm(net[0].weight))
