"""A spiking CNN keeps its LIF membrane potentials as module state (init_hidden=True) and its forward never resets them, so the next batch starts from a membrane that still belongs to the previous, already back-propagated graph.

source: https://github.com/jeshraghian/snntorch/issues/250
symptom: error
rule: ?
shape: spiking network nn.Module (LIF layers with hidden state kept on the module) unrolled over num_steps in forward, ordinary training loop
wrong: retain-graph
why: loss.backward(retain_graph=True) keeps the previous batch graphs alive so the membrane chain back-propagates into earlier batches; the optimizer already changed the weights those graphs saved, so it fails with an in-place version error instead.
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class ATan(torch.autograd.Function):
    @staticmethod
    def forward(ctx, mem):
        ctx.save_for_backward(mem)
        return (mem > 0).float()

    @staticmethod
    def backward(ctx, grad_output):
        (mem,) = ctx.saved_tensors
        return grad_output / (1 + (3.14159 * mem) ** 2)


class Leaky(nn.Module):
    """LIF neuron that stores its membrane on the module (snntorch init_hidden=True)."""

    def __init__(self, beta, output=False):
        super().__init__()
        self.beta = beta
        self.output = output
        self.mem = torch.zeros(1)

    def reset_mem(self):
        self.mem = torch.zeros(1)

    def forward(self, x):
        self.mem = self.beta * self.mem + x - ATan.apply(self.mem - 1.0).detach()
        spk = ATan.apply(self.mem - 1.0)
        return (spk, self.mem) if self.output else spk


def reset(net):
    for m in net.modules():
        if isinstance(m, Leaky):
            m.reset_mem()


class SCNN(nn.Module):
    def __init__(self, num_steps=4):
        super().__init__()
        self.num_steps = num_steps
        self.net = nn.Sequential(
            nn.Conv2d(1, 4, 3), nn.MaxPool2d(2), Leaky(0.5),
            nn.Flatten(), nn.Linear(4 * 3 * 3, 3), Leaky(0.5, output=True),
        )

    def forward(self, x):
        spk_rec, mem_rec = [], []
        for step in range(self.num_steps):
            spk_out, mem_out = self.net(x)
            spk_rec.append(spk_out)
            mem_rec.append(mem_out)
        return torch.stack(spk_rec), torch.stack(mem_rec)


model = SCNN()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
for it in range(3):
    data = torch.randn(2, 1, 8, 8)
    targets = torch.tensor([0, 2])
    spk_rec, mem_rec = model(data)
    loss = sum(nn.functional.cross_entropy(mem_rec[t], targets) for t in range(model.num_steps))
    optimizer.zero_grad()
    loss.backward(retain_graph=True)
    optimizer.step()

g = torch.sqrt(sum((p.grad ** 2).sum() for p in model.parameters()))
print("loss", round(loss.item(), 4))
print("grad_norm", round(g.item(), 4))
print("conv_grad", round(model.net[0].weight.grad.norm().item(), 4))
