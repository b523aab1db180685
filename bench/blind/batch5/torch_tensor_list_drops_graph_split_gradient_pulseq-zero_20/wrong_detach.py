"""split_gradient rebuilds the ramp-up, flat-top and ramp-down amplitudes and times with torch.tensor([...]) from the trapezoid's tensors, which copies their values without a graph, so the optimised gradient amplitude and flat time receive no gradient (.grad stays None).

source: https://github.com/MRsources/pulseq-zero/issues/20
symptom: none-grad
rule: ?
shape: MRI sequence adapter library (trapezoid and extended-trapezoid objects, split_gradient helper, gradient-moment simulation) used in a sequence-parameter optimisation step
wrong: detach
why: passes requires_grad=True to the torch.tensor copies, which makes the loss differentiable but only with respect to those new leaves; amplitude and flat_time still get no gradient
"""
import warnings
from dataclasses import dataclass
import torch

warnings.filterwarnings("ignore")
torch.manual_seed(0)


@dataclass
class Trapezoid:
    channel: str
    amplitude: torch.Tensor
    rise_time: torch.Tensor
    flat_time: torch.Tensor
    fall_time: torch.Tensor


@dataclass
class ExtendedTrapezoid:
    channel: str
    waveform: torch.Tensor
    tt: torch.Tensor

    def area(self):
        return 0.5 * ((self.waveform[1:] + self.waveform[:-1]) * (self.tt[1:] - self.tt[:-1])).sum()


def calc_duration(grad):
    return grad.rise_time + grad.flat_time + grad.fall_time


def make_extended_trapezoid(channel, amplitudes, times):
    return ExtendedTrapezoid(channel=channel, waveform=amplitudes, tt=times)


def split_gradient(grad):
    total_duration = calc_duration(grad)
    ramp_up = make_extended_trapezoid(
        channel=grad.channel,
        amplitudes=torch.tensor([0, grad.amplitude], requires_grad=True),
        times=torch.tensor([0, grad.rise_time], requires_grad=True),
    )
    flat_top = make_extended_trapezoid(
        channel=grad.channel,
        amplitudes=torch.tensor([grad.amplitude, grad.amplitude], requires_grad=True),
        times=torch.tensor([grad.rise_time, grad.rise_time + grad.flat_time], requires_grad=True),
    )
    ramp_down = make_extended_trapezoid(
        channel=grad.channel,
        amplitudes=torch.tensor([grad.amplitude, 0], requires_grad=True),
        times=torch.tensor([grad.rise_time + grad.flat_time, total_duration], requires_grad=True),
    )
    return ramp_up, flat_top, ramp_down


def sequence_moment(amplitude, flat_time, adc_gain):
    grad = Trapezoid("x", amplitude, torch.tensor(1e-1), flat_time, torch.tensor(1e-1))
    ramp_up, flat_top, ramp_down = split_gradient(grad)
    # a readout samples k-space along the flat top, after the ramp-up prephases
    moments = torch.stack([ramp_up.area(), ramp_up.area() + flat_top.area(),
                           ramp_up.area() + flat_top.area() + ramp_down.area()])
    return adc_gain * moments


amplitude = torch.tensor(2.0, requires_grad=True)
flat_time = torch.tensor(0.5, requires_grad=True)
adc_gain = torch.tensor(1.0, requires_grad=True)
target = torch.tensor([0.3, 1.5, 1.8])
opt = torch.optim.Adam([amplitude, flat_time, adc_gain], lr=0.05)
opt.zero_grad()
moments = sequence_moment(amplitude, flat_time, adc_gain)
loss = (moments - target).pow(2).sum()
loss.backward()
opt.step()
print("loss", round(loss.item(), 4))
print("grad amplitude", None if amplitude.grad is None else round(amplitude.grad.item(), 4))
print("grad adc_gain", round(adc_gain.grad.item(), 4))
print("grad flat_time", None if flat_time.grad is None else round(flat_time.grad.item(), 4))
