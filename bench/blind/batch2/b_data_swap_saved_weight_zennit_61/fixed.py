"""The LRP rule swaps modified weights into the convolution with `param.data = ...` and swaps the originals back before calling `autograd.grad`, so the backward reads the restored weights the convolution saved and the relevance is silently computed with the wrong weights.

source: https://github.com/chr5tphr/zennit/pull/61 (fix commit 28916b1)
symptom: silent
rule: ?
shape: explanation code: a context manager that modifies module parameters, a rule class whose backward re-runs the module forward and calls torch.autograd.grad, layer-wise relevance pass over a small CNN
"""

from contextlib import contextmanager

import torch
import torch.nn as nn

torch.manual_seed(0)


@contextmanager
def mod_params(module, modifier, param_keys=None):
    try:
        stored_params = {}
        if param_keys is None:
            param_keys = [name for name, _ in module.named_parameters(recurse=False)]
        for key in param_keys:
            param = getattr(module, key)
            if param is not None:
                stored_params[key] = param
                setattr(module, key, torch.nn.Parameter(modifier(param.data, key)))
        yield module
    finally:
        for key, value in stored_params.items():
            setattr(module, key, value)


def stabilize(x, epsilon=1e-6):
    return x + ((x == 0.0).to(x) + x.sign()) * epsilon


class BasicHook:
    def __init__(self, param_modifier, epsilon=1e-6):
        self.param_modifier = param_modifier
        self.epsilon = epsilon

    def backward(self, module, original_input, grad_output):
        input = original_input.clone().requires_grad_()
        with mod_params(module, self.param_modifier) as modified, torch.autograd.enable_grad():
            output = modified.forward(input)
        gradient = torch.autograd.grad(output, input, grad_outputs=grad_output / stabilize(output, self.epsilon))[0]
        return input * gradient


class Gamma(BasicHook):
    def __init__(self, gamma=0.25):
        super().__init__(lambda param, name: param + gamma * param.clamp(min=0))


class Epsilon(BasicHook):
    def __init__(self, epsilon=1e-6):
        super().__init__(lambda param, name: param, epsilon)


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(4, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 6 * 6, 3)

    def forward(self, x):
        x = torch.relu(self.conv1(x))
        x = torch.relu(self.conv2(x))
        return self.fc(x.flatten(1))


def explain(model, x, target):
    rules = {"conv1": Gamma(), "conv2": Gamma(), "fc": Epsilon()}
    a0 = x
    a1 = torch.relu(model.conv1(a0))
    a2 = torch.relu(model.conv2(a1))
    logits = model.fc(a2.flatten(1))
    relevance = torch.zeros_like(logits)
    relevance[:, target] = logits[:, target]
    relevance = rules["fc"].backward(model.fc, a2.flatten(1), relevance).view_as(a2)
    relevance = rules["conv2"].backward(model.conv2, a1, relevance)
    relevance = rules["conv1"].backward(model.conv1, a0, relevance)
    return logits, relevance


model = SmallCNN().eval()
x = torch.rand(2, 1, 6, 6)
with torch.no_grad():
    logits, relevance = explain(model, x, target=1)
    logits_again, relevance_again = explain(model, x, target=1)

print("logit", round(logits[0, 1].item(), 4))
print("relevance sum", round(relevance.sum().item(), 4))
print("relevance abs sum", round(relevance.abs().sum().item(), 4))
print("second run relevance sum", round(relevance_again.sum().item(), 4))
