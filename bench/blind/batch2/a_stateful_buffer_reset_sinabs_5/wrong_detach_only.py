"""The spiking layer keeps its membrane state in a registered buffer and resets it between batches with an in-place `buffer.zero_()`, which keeps the old graph attached to the state, so the next batch's backward runs into the freed graph of the previous one.

source: https://github.com/synsense/sinabs/issues/5 (fix commit ffae161)
symptom: error
rule: ?
shape: stateful nn.Module spiking layers (buffers for membrane state, surrogate-gradient custom autograd Function) in a Sequential with linear layers, BPTT training loop with Adam and reset_states per batch
wrong: forward-change
why: detaching without zeroing no longer resets the membrane state, so each batch starts from the previous batch's potentials and the forward changes.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class SingleSpike(torch.autograd.Function):
    @staticmethod
    def forward(ctx, v_mem, threshold):
        ctx.save_for_backward(v_mem)
        ctx.threshold = threshold
        return (v_mem >= threshold).float()

    @staticmethod
    def backward(ctx, grad_output):
        (v_mem,) = ctx.saved_tensors
        # periodic-exponential-like surrogate
        grad = torch.exp(-((v_mem - ctx.threshold) ** 2))
        return grad_output * grad, None


class StatefulLayer(nn.Module):
    def __init__(self, state_names):
        super().__init__()
        for state_name in state_names:
            self.register_buffer(state_name, torch.zeros((0)))

    def is_state_initialised(self):
        return all(buffer.shape != torch.Size([0]) for buffer in self.buffers())

    def state_has_shape(self, shape):
        return all(buffer.shape == shape for buffer in self.buffers())

    def init_state_with_shape(self, shape):
        for name, buffer in self.named_buffers():
            self.register_buffer(name, torch.zeros(shape, device=buffer.device))
        self.reset_states()

    def reset_states(self):
        if self.is_state_initialised():
            for buffer in self.buffers():
                buffer.detach_()


class IAF(StatefulLayer):
    def __init__(self, threshold=1.0):
        super().__init__(state_names=["v_mem"])
        self.threshold = threshold

    def forward(self, input_data):
        batch_size, time_steps, *trailing_dim = input_data.shape
        if not self.is_state_initialised() or not self.state_has_shape((batch_size, *trailing_dim)):
            self.init_state_with_shape((batch_size, *trailing_dim))
        v_mem = self.v_mem
        output_spikes = []
        for step in range(time_steps):
            v_mem = v_mem + input_data[:, step]
            spikes = SingleSpike.apply(v_mem, self.threshold)
            v_mem = v_mem - spikes * self.threshold
            output_spikes.append(spikes)
        self.v_mem = v_mem
        return torch.stack(output_spikes, 1)


class TimeLinear(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.linear = nn.Linear(n_in, n_out)

    def forward(self, x):
        return self.linear(x)


model = nn.Sequential(TimeLinear(10, 16), IAF(), TimeLinear(16, 4), IAF())
opt = torch.optim.Adam(model.parameters(), lr=1e-2)


def reset_states(net):
    for layer in net:
        if isinstance(layer, StatefulLayer):
            layer.reset_states()


for batch in range(3):
    x = torch.rand(8, 12, 10) * 0.8
    y = torch.randint(0, 4, (8,))
    reset_states(model)
    opt.zero_grad()
    out = model(x)
    loss = F.cross_entropy(out.sum(1), y)
    loss.backward()
    opt.step()


def grad_norm(p):
    return None if p.grad is None else round(p.grad.norm().item(), 4)


print("loss", round(loss.item(), 4))
print("first linear grad norm", grad_norm(model[0].linear.weight))
print("second linear grad norm", grad_norm(model[2].linear.weight))
