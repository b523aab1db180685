"""The recurrent spiking network's training function hands only the feed-forward weights `[w1, w2]` to the optimizer, so the recurrent weights `v1` get gradients but are never updated.

source: https://github.com/fzenke/spytorch/issues/7 (fix commit bbab0a2)
symptom: no-training
rule: ?
shape: recurrent spiking network as module-level tensors and functions (custom autograd Function surrogate spike, time loop), NLL loss plus spike regularizer, Adamax training loop
"""

import numpy as np
import torch
import torch.nn as nn

torch.manual_seed(0)
dtype = torch.float

nb_inputs = 40
nb_hidden = 20
nb_outputs = 5
time_step = 1e-3
nb_steps = 30
batch_size = 16

tau_mem = 10e-3
tau_syn = 5e-3
alpha = float(np.exp(-time_step / tau_syn))
beta = float(np.exp(-time_step / tau_mem))

weight_scale = 0.2
w1 = torch.empty((nb_inputs, nb_hidden), dtype=dtype, requires_grad=True)
torch.nn.init.normal_(w1, mean=0.0, std=weight_scale / np.sqrt(nb_inputs))
w2 = torch.empty((nb_hidden, nb_outputs), dtype=dtype, requires_grad=True)
torch.nn.init.normal_(w2, mean=0.0, std=weight_scale / np.sqrt(nb_hidden))
v1 = torch.empty((nb_hidden, nb_hidden), dtype=dtype, requires_grad=True)
torch.nn.init.normal_(v1, mean=0.0, std=weight_scale / np.sqrt(nb_hidden))
v1_init = v1.detach().clone()


class SurrGradSpike(torch.autograd.Function):
    scale = 100.0  # controls steepness of surrogate gradient

    @staticmethod
    def forward(ctx, input):
        ctx.save_for_backward(input)
        out = torch.zeros_like(input)
        out[input > 0] = 1.0
        return out

    @staticmethod
    def backward(ctx, grad_output):
        (input,) = ctx.saved_tensors
        grad_input = grad_output.clone()
        grad = grad_input / (SurrGradSpike.scale * torch.abs(input) + 1.0) ** 2
        return grad


spike_fn = SurrGradSpike.apply


def run_snn(inputs):
    syn = torch.zeros((batch_size, nb_hidden), dtype=dtype)
    mem = torch.zeros((batch_size, nb_hidden), dtype=dtype)
    mem_rec = [mem]
    spk_rec = [mem]
    h1 = torch.zeros((batch_size, nb_hidden), dtype=dtype)
    h1_from_input = torch.einsum("abc,cd->abd", (inputs, w1))
    for t in range(nb_steps):
        h1 = h1_from_input[:, t] + torch.einsum("ab,bc->ac", (h1, v1))
        mthr = mem - 1.0
        out = spike_fn(mthr)
        rst = torch.zeros_like(mem)
        c = mthr > 0
        rst[c] = torch.ones_like(mem)[c]
        new_syn = alpha * syn + h1
        new_mem = beta * mem + syn - rst
        mem = new_mem
        syn = new_syn
        mem_rec.append(mem)
        spk_rec.append(out)
    mem_rec = torch.stack(mem_rec, dim=1)
    spk_rec = torch.stack(spk_rec, dim=1)

    h2 = torch.einsum("abc,cd->abd", (spk_rec, w2))
    flt = torch.zeros((batch_size, nb_outputs), dtype=dtype)
    out = torch.zeros((batch_size, nb_outputs), dtype=dtype)
    out_rec = [out]
    for t in range(nb_steps):
        new_flt = alpha * flt + h2[:, t]
        new_out = beta * out + flt
        flt = new_flt
        out = new_out
        out_rec.append(out)
    out_rec = torch.stack(out_rec, dim=1)
    return out_rec, [mem_rec, spk_rec]


def data_generator(n_batches=2):
    for _ in range(n_batches):
        rates = torch.rand(batch_size, 1, nb_inputs) * 0.3
        x = (torch.rand(batch_size, nb_steps, nb_inputs) < rates).to(dtype) * 4.0
        y = torch.randint(0, nb_outputs, (batch_size,))
        yield x, y


def train(lr=2e-2, nb_epochs=3):
    params = [w1, w2]  # bench: bug
    optimizer = torch.optim.Adamax(params, lr=lr, betas=(0.9, 0.999))
    log_softmax_fn = nn.LogSoftmax(dim=1)
    loss_fn = nn.NLLLoss()
    loss_hist = []
    for e in range(nb_epochs):
        local_loss = []
        for x_local, y_local in data_generator():
            output, recs = run_snn(x_local)
            _, spks = recs
            m, _ = torch.max(output, 1)
            log_p_y = log_softmax_fn(m)
            reg_loss = 2e-6 * torch.sum(spks)
            reg_loss += 2e-6 * torch.mean(torch.sum(torch.sum(spks, dim=0), dim=0) ** 2)
            loss_val = loss_fn(log_p_y, y_local) + reg_loss
            optimizer.zero_grad()
            loss_val.backward()
            optimizer.step()
            local_loss.append(loss_val.item())
        loss_hist.append(np.mean(local_loss))
    return loss_hist


loss_hist = train()
print("loss", round(float(loss_hist[-1]), 4))
print("v1 change norm", round((v1.detach() - v1_init).norm().item(), 4))
print("w1 norm", round(w1.detach().norm().item(), 4))
