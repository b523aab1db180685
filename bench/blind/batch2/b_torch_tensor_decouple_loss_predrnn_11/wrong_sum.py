"""PredRNN-V2 averages its per-step memory-decoupling losses with `torch.mean(torch.tensor(decouple_loss))`, which copies them into a new leaf, so the decoupling term is in the loss value but never trains the adapter or the cells.

source: https://github.com/thuml/predrnn-pytorch/issues/11 (fix commit e1cf111)
symptom: silent
rule: ?
shape: recurrent video-prediction model (spatiotemporal LSTM cell nn.Module, RNN nn.Module looping over time and layers with scheduled sampling, a shared adapter conv), MSE + decoupling loss, Adam training loop
wrong: forward-change
why: summing the per-step losses keeps the graph but multiplies the decoupling term by (total_length - 1) * num_layers, so it dominates the loss and its gradients.
"""

from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class SpatioTemporalLSTMCell(nn.Module):
    def __init__(self, in_channel, num_hidden, width, filter_size, stride):
        super().__init__()
        self.num_hidden = num_hidden
        self.padding = filter_size // 2
        self._forget_bias = 1.0
        self.conv_x = nn.Conv2d(in_channel, num_hidden * 7, filter_size, stride, self.padding, bias=False)
        self.conv_h = nn.Conv2d(num_hidden, num_hidden * 4, filter_size, stride, self.padding, bias=False)
        self.conv_m = nn.Conv2d(num_hidden, num_hidden * 3, filter_size, stride, self.padding, bias=False)
        self.conv_o = nn.Conv2d(num_hidden * 2, num_hidden, filter_size, stride, self.padding, bias=False)
        self.conv_last = nn.Conv2d(num_hidden * 2, num_hidden, kernel_size=1, stride=1, padding=0, bias=False)

    def forward(self, x_t, h_t, c_t, m_t):
        x_concat = self.conv_x(x_t)
        h_concat = self.conv_h(h_t)
        m_concat = self.conv_m(m_t)
        i_x, f_x, g_x, i_x_prime, f_x_prime, g_x_prime, o_x = torch.split(x_concat, self.num_hidden, dim=1)
        i_h, f_h, g_h, o_h = torch.split(h_concat, self.num_hidden, dim=1)
        i_m, f_m, g_m = torch.split(m_concat, self.num_hidden, dim=1)
        i_t = torch.sigmoid(i_x + i_h)
        f_t = torch.sigmoid(f_x + f_h + self._forget_bias)
        g_t = torch.tanh(g_x + g_h)
        delta_c = i_t * g_t
        c_new = f_t * c_t + delta_c
        i_t_prime = torch.sigmoid(i_x_prime + i_m)
        f_t_prime = torch.sigmoid(f_x_prime + f_m + self._forget_bias)
        g_t_prime = torch.tanh(g_x_prime + g_m)
        delta_m = i_t_prime * g_t_prime
        m_new = f_t_prime * m_t + delta_m
        mem = torch.cat((c_new, m_new), 1)
        o_t = torch.sigmoid(o_x + o_h + self.conv_o(mem))
        h_new = o_t * torch.tanh(self.conv_last(mem))
        return h_new, c_new, m_new, delta_c, delta_m


class RNN(nn.Module):
    def __init__(self, num_layers, num_hidden, configs):
        super().__init__()
        self.configs = configs
        self.frame_channel = configs.patch_size * configs.patch_size * configs.img_channel
        self.num_layers = num_layers
        self.num_hidden = num_hidden
        width = configs.img_width // configs.patch_size
        self.MSE_criterion = nn.MSELoss()
        cell_list = []
        for i in range(num_layers):
            in_channel = self.frame_channel if i == 0 else num_hidden[i - 1]
            cell_list.append(SpatioTemporalLSTMCell(in_channel, num_hidden[i], width, configs.filter_size, configs.stride))
        self.cell_list = nn.ModuleList(cell_list)
        self.conv_last = nn.Conv2d(num_hidden[num_layers - 1], self.frame_channel, 1, 1, 0, bias=False)
        adapter_num_hidden = num_hidden[0]
        self.adapter = nn.Conv2d(adapter_num_hidden, adapter_num_hidden, 1, stride=1, padding=0, bias=False)

    def forward(self, frames_tensor, mask_true):
        frames = frames_tensor.permute(0, 1, 4, 2, 3).contiguous()
        mask_true = mask_true.permute(0, 1, 4, 2, 3).contiguous()
        batch, height, width = frames.shape[0], frames.shape[3], frames.shape[4]
        next_frames, h_t, c_t, delta_c_list, delta_m_list = [], [], [], [], []
        decouple_loss = []
        for i in range(self.num_layers):
            zeros = torch.zeros([batch, self.num_hidden[i], height, width])
            h_t.append(zeros)
            c_t.append(zeros)
            delta_c_list.append(zeros)
            delta_m_list.append(zeros)
        memory = torch.zeros([batch, self.num_hidden[0], height, width])

        for t in range(self.configs.total_length - 1):
            if t < self.configs.input_length:
                net = frames[:, t]
            else:
                net = mask_true[:, t - self.configs.input_length] * frames[:, t] + (
                    1 - mask_true[:, t - self.configs.input_length]
                ) * x_gen
            h_t[0], c_t[0], memory, delta_c, delta_m = self.cell_list[0](net, h_t[0], c_t[0], memory)
            delta_c_list[0] = F.normalize(self.adapter(delta_c).view(delta_c.shape[0], delta_c.shape[1], -1), dim=2)
            delta_m_list[0] = F.normalize(self.adapter(delta_m).view(delta_m.shape[0], delta_m.shape[1], -1), dim=2)
            for i in range(1, self.num_layers):
                h_t[i], c_t[i], memory, delta_c, delta_m = self.cell_list[i](h_t[i - 1], h_t[i], c_t[i], memory)
                delta_c_list[i] = F.normalize(self.adapter(delta_c).view(delta_c.shape[0], delta_c.shape[1], -1), dim=2)
                delta_m_list[i] = F.normalize(self.adapter(delta_m).view(delta_m.shape[0], delta_m.shape[1], -1), dim=2)
            x_gen = self.conv_last(h_t[self.num_layers - 1])
            next_frames.append(x_gen)
            for i in range(0, self.num_layers):
                decouple_loss.append(torch.mean(torch.abs(torch.cosine_similarity(delta_c_list[i], delta_m_list[i], dim=2))))

        decouple_loss = torch.sum(torch.stack(decouple_loss, dim=0))
        next_frames = torch.stack(next_frames, dim=0).permute(1, 0, 3, 4, 2).contiguous()
        loss = self.MSE_criterion(next_frames, frames_tensor[:, 1:]) + self.configs.decouple_beta * decouple_loss
        return next_frames, loss, decouple_loss


configs = SimpleNamespace(
    patch_size=1, img_channel=1, img_width=8, filter_size=3, stride=1, total_length=6, input_length=3, decouple_beta=0.1
)
model = RNN(2, [8, 8], configs)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
frames = torch.rand(2, configs.total_length, 8, 8, 1)
mask_true = torch.zeros(2, configs.total_length - configs.input_length - 1, 8, 8, 1)

for itr in range(2):
    opt.zero_grad()
    _, loss, decouple_loss = model(frames, mask_true)
    loss.backward()
    opt.step()


def grad_norm(p):
    return None if p.grad is None else round(p.grad.norm().item(), 4)


print("loss", round(loss.item(), 4))
print("decouple loss", round(decouple_loss.item(), 4))
print("adapter grad norm", grad_norm(model.adapter.weight))
print("cell0 conv_m grad norm", grad_norm(model.cell_list[0].conv_m.weight))
