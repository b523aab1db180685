"""The one-third-octave band energies are square-rooted with .pow(0.5) without an epsilon, so silent (all-zero) frames give an infinite derivative and nan gradients.

source: https://github.com/mpariente/pytorch_stoi/issues/7
symptom: nan-grad
rule: ?
shape: loss nn.Module (negative STOI: STFT, band matrix, unfold, normalisation) used to train a small enhancement filter with Adam
wrong: other
why: masking the zero bands with torch.where after the sqrt leaves the forward unchanged and does not stop the nan: the unselected branch still multiplies 0 by the infinite derivative of the sqrt.
"""
import numpy as np
import torch
from torch import nn
from torch.nn.functional import unfold

torch.manual_seed(0)

# constants of pystoi.stoi
FS, N_FRAME, NUMBAND, MINFREQ, N, BETA, DYN_RANGE = 10000, 256, 15, 150, 30, -15., 40
EPS = 1e-8


def thirdoct(fs, nfft, num_bands, min_freq):
    f = np.linspace(0, fs, nfft + 1)
    f = f[:int(nfft / 2) + 1]
    k = np.array(range(num_bands)).astype(float)
    cf = np.power(2. ** (1. / 3), k) * min_freq
    freq_low = min_freq * np.power(2., (2 * k - 1) / 6)
    freq_high = min_freq * np.power(2., (2 * k + 1) / 6)
    obm = np.zeros((num_bands, len(f)))
    for i in range(len(cf)):
        fl_ii = np.argmin(np.square(f - freq_low[i]))
        fh_ii = np.argmin(np.square(f - freq_high[i]))
        obm[i, fl_ii:fh_ii] = 1
    return obm, cf


class NegSTOILoss(nn.Module):
    def __init__(self, sample_rate: int = 10000, use_vad: bool = False, extended: bool = False):
        super().__init__()
        self.sample_rate = sample_rate
        self.use_vad = use_vad
        self.extended = extended
        self.intel_frames = N
        self.beta = BETA
        self.dyn_range = DYN_RANGE
        self.win_len = (N_FRAME * sample_rate) // FS
        self.nfft = 2 * self.win_len
        win = torch.from_numpy(np.hanning(self.win_len + 2)[1:-1]).float()
        self.win = nn.Parameter(win, requires_grad=False)
        obm_mat = thirdoct(sample_rate, self.nfft, NUMBAND, MINFREQ)[0]
        self.OBM = nn.Parameter(torch.from_numpy(obm_mat).float(), requires_grad=False)

    def forward(self, est_targets: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x_spec = self.stft(targets, self.win, self.nfft, overlap=2)
        y_spec = self.stft(est_targets, self.win, self.nfft, overlap=2)
        # Apply OB matrix to the spectrograms as in Eq. (1)
        x_tob = torch.matmul(self.OBM, torch.norm(x_spec, 2, -1) ** 2).pow(0.5)
        y_tob = torch.matmul(self.OBM, torch.norm(y_spec, 2, -1) ** 2).pow(0.5)
        y_tob = torch.where(y_tob > 0, y_tob, torch.zeros_like(y_tob))
        # Perform N-frame segmentation --> (batch, 15, N, n_chunks)
        batch = targets.shape[0]
        x_seg = unfold(x_tob.unsqueeze(2), kernel_size=(1, self.intel_frames), stride=(1, 1)).view(batch, x_tob.shape[1], N, -1)
        y_seg = unfold(y_tob.unsqueeze(2), kernel_size=(1, self.intel_frames), stride=(1, 1)).view(batch, y_tob.shape[1], N, -1)
        # Find normalization constants and normalize
        norm_const = (torch.norm(x_seg, 2, dim=2, keepdim=True) / (torch.norm(y_seg, 2, dim=2, keepdim=True) + EPS))
        y_seg_normed = y_seg * norm_const
        # Clip as described in [1]
        clip_val = 10 ** (-self.beta / 20)
        y_prim = torch.min(y_seg_normed, x_seg * (1 + clip_val))
        # Mean/var normalize vectors
        y_prim = meanvar_norm(y_prim, dim=2)
        x_seg = meanvar_norm(x_seg, dim=2)
        corr_comp = y_prim * x_seg
        correction = x_seg.shape[1] * x_seg.shape[-1]
        sum_over = list(range(1, x_seg.ndim))  # Keep batch dim
        return - torch.sum(corr_comp, dim=sum_over) / correction

    @staticmethod
    def stft(x, win, fft_size, overlap=4):
        win_len = win.shape[0]
        hop = int(win_len / overlap)
        x_padded = torch.nn.functional.pad(x, pad=[0, hop])
        spec = torch.stft(x_padded, fft_size, hop_length=hop, window=win, center=False,
                          win_length=win_len, return_complex=True)
        return torch.view_as_real(spec)


def meanvar_norm(x, dim=-1):
    x = (x - x.mean(dim=dim, keepdim=True)) / (x.norm(p=2, dim=dim, keepdim=True) + EPS)
    return x


# tiny enhancement model: a learnable FIR filter without bias, so silence stays exactly zero
enhancer = nn.Conv1d(1, 1, 33, padding=16, bias=False)
loss_func = NegSTOILoss(sample_rate=10000)
optimizer = torch.optim.Adam(enhancer.parameters(), lr=1e-3)

t = torch.arange(6000) / 10000.0
clean = torch.sin(2 * np.pi * 440 * t) * (1 + 0.5 * torch.sin(2 * np.pi * 3 * t))
clean[:1500] = 0.0  # leading silence
clean = clean.unsqueeze(0)
noisy = clean + 0.3 * torch.randn_like(clean) * (clean != 0)

for step in range(3):
    optimizer.zero_grad()
    est = enhancer(noisy.unsqueeze(1)).squeeze(1)
    loss = loss_func(est, clean).mean()
    loss.backward()
    grad_norm = enhancer.weight.grad.norm()
    optimizer.step()

print("loss", round(loss.item(), 4))
print("filter grad norm", round(grad_norm.item(), 4))
print("filter weight norm", round(enhancer.weight.norm().item(), 4))
