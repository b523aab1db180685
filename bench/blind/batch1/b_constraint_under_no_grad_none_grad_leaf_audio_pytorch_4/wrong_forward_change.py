"""GaborConstraint clamps the learnable Gabor kernel inside torch.no_grad(), so the filters built from it are cut from the graph and the kernel's .grad stays None.

source: https://github.com/denfed/leaf-audio-pytorch/pull/4
symptom: none-grad
rule: ?
shape: nn.Module with a constraint submodule applied in forward (learnable Gabor filterbank -> complex impulse responses -> conv1d), audio classifier trained with Adam
wrong: forward-change
why: skipping the constraint lets gradients reach the kernel, but the out-of-range centre and widths are no longer clipped, so the filters, the loss and the gradients differ from the fixed constraint.
"""
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

torch.manual_seed(0)


def gabor_impulse_response(t: Tensor, center: Tensor, fwhm: Tensor) -> Tensor:
    """Computes the gabor impulse response."""
    denominator = 1.0 / (np.sqrt(2.0 * math.pi) * fwhm)
    gaussian = torch.exp(torch.tensordot(1.0 / (2. * fwhm**2), -t**2, dims=0))
    center_frequency_complex = center.type(torch.complex64)
    t_complex = t.type(torch.complex64)
    sinusoid = torch.exp(1j * torch.tensordot(center_frequency_complex, t_complex, dims=0))
    denominator = denominator.type(torch.complex64).unsqueeze(1)
    gaussian = gaussian.type(torch.complex64)
    return denominator * sinusoid * gaussian


def gabor_filters(kernel, size: int = 401, t_tensor=None) -> Tensor:
    return gabor_impulse_response(t_tensor, center=kernel[:, 0], fwhm=kernel[:, 1])


class GaborConstraint(nn.Module):
    """Constraint mu and sigma, in radians."""

    def __init__(self, kernel_size):
        super(GaborConstraint, self).__init__()
        self._kernel_size = kernel_size

    def forward(self, kernel):
        with torch.no_grad():
            mu_lower = 0.
            mu_upper = math.pi
            sigma_lower = 4 * math.sqrt(2 * math.log(2)) / math.pi
            sigma_upper = self._kernel_size * math.sqrt(2 * math.log(2)) / math.pi
            clipped_mu = torch.clamp(kernel[:, 0], mu_lower, mu_upper)
            clipped_sigma = torch.clamp(kernel[:, 1], sigma_lower, sigma_upper)
            return torch.stack([clipped_mu, clipped_sigma], dim=1)


def gabor_init(filters):
    mu = torch.linspace(0.05, 3.3, filters)  # the last center lies above pi and is clamped
    sigma = torch.linspace(1.0, 12.0, filters)  # the first widths lie below the lower bound
    return torch.stack([mu, sigma], dim=1)


class GaborConv1D(nn.Module):
    def __init__(self, filters, kernel_size, strides, padding, use_bias, trainable):
        super(GaborConv1D, self).__init__()
        self._filters = filters // 2
        self._kernel_size = kernel_size
        self._strides = strides
        self._padding = padding
        self._use_bias = use_bias
        self._kernel = nn.Parameter(gabor_init(self._filters), requires_grad=trainable)
        self._kernel_constraint = GaborConstraint(self._kernel_size)
        self.register_buffer("gabor_filter_init_t",
                             torch.arange(-(self._kernel_size // 2), (self._kernel_size + 1) // 2, dtype=torch.float32))

    def forward(self, x):
        kernel = self._kernel
        filters = gabor_filters(kernel, self._kernel_size, self.gabor_filter_init_t)
        real_filters = torch.real(filters)
        img_filters = torch.imag(filters)
        stacked_filters = torch.stack([real_filters, img_filters], dim=1)
        stacked_filters = stacked_filters.view(2 * self._filters, self._kernel_size)
        stacked_filters = stacked_filters.unsqueeze(1)
        return F.conv1d(x, stacked_filters, bias=None, stride=self._strides, padding=self._padding)


class LeafClassifier(nn.Module):
    def __init__(self, n_filters=8, kernel_size=33, n_classes=3):
        super().__init__()
        self.conv = GaborConv1D(2 * n_filters, kernel_size, strides=1, padding=kernel_size // 2, use_bias=False, trainable=True)
        self.head = nn.Linear(n_filters, n_classes)

    def forward(self, wav):
        out = self.conv(wav)
        energy = out[:, 0::2] ** 2 + out[:, 1::2] ** 2
        feats = torch.log(energy.mean(-1) + 1e-6)
        return self.head(feats)


model = LeafClassifier()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
t = torch.arange(400).float()
freqs = torch.tensor([0.3, 1.2, 2.5])
labels = torch.randint(0, 3, (12,))
wav = (torch.sin(freqs[labels][:, None] * t) + 0.3 * torch.randn(12, 400)).unsqueeze(1)

for step in range(3):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(wav), labels)
    loss.backward()
    kgrad = model.conv._kernel.grad
    optimizer.step()

print("loss", round(loss.item(), 4))
print("gabor kernel grad norm", None if kgrad is None else round(kgrad.norm().item(), 4))
print("gabor kernel norm", round(model.conv._kernel.norm().item(), 4))
