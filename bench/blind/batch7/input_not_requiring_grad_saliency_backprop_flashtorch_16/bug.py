"""flashtorch's Backprop records the saliency gradient from a backward hook on the first conv layer, but calculate_gradients never makes the input image require grad, so autograd computes no gradient for it and the recorded grad_in[0] is None.

source: https://github.com/MisaOgura/flashtorch/issues/16
symptom: none-grad
rule: ?
shape: library helper class (Backprop with a backward hook on the model's first Conv2d) computing a saliency map of a small CNN nn.Module
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class Backprop:
    def __init__(self, model):
        self.model = model
        self.gradients = None
        first_conv = [m for m in model.modules() if isinstance(m, nn.Conv2d)][0]
        first_conv.register_full_backward_hook(self._record_gradients)

    def _record_gradients(self, module, grad_in, grad_out):
        self.gradients = grad_in[0]

    def calculate_gradients(self, input_, target_class):
        self.model.zero_grad()
        self.gradients = None
        output = self.model(input_)  # bench: bug
        target = torch.zeros_like(output)
        target[0][target_class] = 1
        output.backward(gradient=target)
        return self.gradients


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU())
        self.classifier = nn.Linear(8, 5)

    def forward(self, x):
        return self.classifier(self.features(x).mean((2, 3)))


model = SmallCNN()
image = torch.randn(1, 3, 12, 12)
backprop = Backprop(model)
g = backprop.calculate_gradients(image, target_class=4)
print("saliency", None if g is None else (tuple(g.shape), round(g.abs().max(1)[0].mean().item(), 4)))
print("first conv grad", round(model.features[0].weight.grad.norm().item(), 4))
