"""The NTK weighting scheme measures each condition's gradient norm by calling loss.backward(retain_graph=True) and reading p.grad, so every condition after the first sees the sum of the previous conditions' gradients, and the leftover .grad is added to the solver's training gradient.

source: https://github.com/PINA-org/PINA/issues/718
symptom: silent
rule: ?
shape: PINN-style solver class holding a model and a weighting object (NeuralTangentKernelWeighting.weights_update over a dict of per-condition losses); training_step = zero_grad, per-condition losses, weights update, weighted sum backward, step
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class NeuralTangentKernelWeighting:
    def __init__(self, alpha=0.5):
        self.alpha = alpha
        self.weights = {}

    def weights_update(self, model, losses):
        losses_norm = {}
        for condition, loss in losses.items():
            loss.backward(retain_graph=True)  # bench: bug
            grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.requires_grad])  # bench: bug
            losses_norm[condition] = grads.norm()
        self.weights = {
            c: self.alpha * self.weights.get(c, 1.0) + (1 - self.alpha) * losses_norm[c] / sum(losses_norm.values())
            for c in losses
        }
        return self.weights


class Solver:
    def __init__(self, model, weighting):
        self.model, self.weighting = model, weighting
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.05)

    def training_step(self, batches):
        self.optimizer.zero_grad()
        losses = {c: nn.functional.mse_loss(self.model(x), y) for c, (x, y) in batches.items()}
        weights = self.weighting.weights_update(self.model, losses)
        loss = sum(weights[c] * l for c, l in losses.items())
        loss.backward()
        self.grad_norm = self.model[0].weight.grad.norm().item()
        self.optimizer.step()
        return loss


model = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 1))
solver = Solver(model, NeuralTangentKernelWeighting())
xb = torch.rand(12, 2)
xi = torch.rand(20, 2)
batches = {"boundary": (xb, torch.zeros(12, 1)), "interior": (xi, torch.sin(xi.sum(1, keepdim=True)))}
for _ in range(3):
    loss = solver.training_step(batches)
print("loss", round(loss.item(), 4))
print("weights", [round(float(w), 4) for w in solver.weighting.weights.values()])
print("grad norm", round(solver.grad_norm, 4))
