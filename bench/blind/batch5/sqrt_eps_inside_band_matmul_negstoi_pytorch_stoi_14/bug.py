"""NegSTOILoss adds EPS to the power spectrum before the one-third-octave band matrix, so an empty band (a zero row of the matrix) still gives sqrt(0) and its infinite derivative turns the gradient nan.

source: https://github.com/mpariente/pytorch_stoi/pull/14
symptom: nan-grad
rule: ?
shape: speech enhancement loss module (STFT, band matrix, sqrt, segment correlation) on a small conv denoiser, one training step
"""
import torch
from torch import nn

torch.manual_seed(0)
EPS = 1e-8


def meanvar_norm(x, dim=-1):
    x = x - x.mean(dim=dim, keepdim=True)
    return x / (x.norm(p=2, dim=dim, keepdim=True) + EPS)


class NegSTOILoss(nn.Module):
    def __init__(self, win_len=32, n_bands=6, seg=8):
        super().__init__()
        self.win_len = win_len
        self.nfft = 2 * win_len
        self.seg = seg
        n_bins = self.nfft // 2 + 1
        obm = torch.zeros(n_bands, n_bins)
        edges = [1, 3, 6, 10, 16, 24]
        for b in range(n_bands - 1):
            obm[b, edges[b]:edges[b + 1]] = 1.0
        # the highest band lies above Nyquist at this sample rate: an empty row
        self.register_buffer("OBM", obm)
        self.register_buffer("win", torch.hann_window(win_len))

    def stft(self, x):
        return torch.stft(x, self.nfft, hop_length=self.win_len // 2, win_length=self.win_len,
                          window=self.win, center=False, return_complex=True)

    def forward(self, est, target):
        x_spec = self.stft(target)
        y_spec = self.stft(est)
        x_tob = torch.matmul(self.OBM, x_spec.abs().pow(2) + EPS).sqrt()  # bench: bug
        y_tob = torch.matmul(self.OBM, y_spec.abs().pow(2) + EPS).sqrt()  # bench: bug
        x_seg = x_tob.unfold(-1, self.seg, 1)
        y_seg = y_tob.unfold(-1, self.seg, 1)
        y_seg = meanvar_norm(y_seg, dim=-1)
        x_seg = meanvar_norm(x_seg, dim=-1)
        return -(x_seg * y_seg).sum(-1).mean(dim=(1, 2))


class Denoiser(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv1d(1, 8, 9, padding=4)
        self.conv2 = nn.Conv1d(8, 1, 9, padding=4)

    def forward(self, x):
        return x + self.conv2(torch.tanh(self.conv1(x[:, None])))[:, 0]


model = Denoiser()
loss_fn = NegSTOILoss()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
clean = torch.randn(4, 512)
noisy = clean + 0.3 * torch.randn(4, 512)
opt.zero_grad()
loss = loss_fn(model(noisy), clean).mean()
loss.backward()
print("loss", round(loss.item(), 4))
print("grad conv1", round(model.conv1.weight.grad.norm().item(), 4))
print("grad conv2", round(model.conv2.weight.grad.norm().item(), 4))
