"""DiffusionRobustModel runs the diffusion denoising step under torch.no_grad(), so the perturbation that SmoothInv optimises through the denoiser and classifier gets no gradient: delta.grad stays None.

source: https://github.com/locuslab/smoothinv/issues/1
symptom: none-grad
rule: ?
shape: attack/synthesis class (learned perturbation delta, SGD) on a robust model wrapper (noise vectors, diffusion q_sample + one denoising p_sample step, classifier, averaged softmax)
wrong: detach
why: runs the denoiser without grad and passes the gradient straight through it (x_t + (denoised - x_t).detach()), so delta gets a gradient that ignores the denoiser's Jacobian and the synthesized perturbation differs
"""
import torch
from torch import nn
import torch.nn.functional as F

torch.manual_seed(0)


class TinyDiffusion:
    def __init__(self, T=10):
        self.alphas_cumprod = torch.linspace(0.99, 0.5, T)

    def q_sample(self, x_start, t, noise):
        a = self.alphas_cumprod[t].view(-1, 1, 1, 1)
        return a.sqrt() * x_start + (1 - a).sqrt() * noise

    def p_sample(self, model, x_t, t):
        a = self.alphas_cumprod[t].view(-1, 1, 1, 1)
        eps = model(x_t)
        return {"sample": ((x_t - (1 - a).sqrt() * eps) / a.sqrt()).clamp(-1, 1)}


class DiffusionRobustModel(nn.Module):
    def __init__(self, num_noise_vec=4, t=3):
        super().__init__()
        self.model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.SiLU(), nn.Conv2d(8, 3, 3, padding=1))
        self.classifier = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(),
                                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 5))
        self.diffusion = TinyDiffusion()
        self.num_noise_vec, self.t = num_noise_vec, t

    def forward(self, x):
        x = x.repeat((self.num_noise_vec, 1, 1, 1))
        x = x * 2 - 1
        x = self.diffusion_denoise(x, self.t)
        x = (x + 1) / 2
        out = F.softmax(self.classifier(x), dim=1)
        return torch.mean(out, dim=0, keepdim=True)

    def diffusion_denoise(self, x_start, t):
        t_batch = torch.tensor([t] * len(x_start))
        noise = torch.randn_like(x_start)
        x_t_start = self.diffusion.q_sample(x_start=x_start, t=t_batch, noise=noise)
        with torch.no_grad():
            denoised = self.diffusion.p_sample(self.model, x_t_start, t_batch)["sample"]
        out = x_t_start + (denoised - x_t_start).detach()
        return out


class SmoothInv:
    def __init__(self, max_steps, step_size, max_norm=None):
        self.max_steps, self.step_size, self.max_norm = max_steps, step_size, max_norm

    def synthesize(self, model, inputs, labels):
        delta = torch.zeros((len(labels), *inputs.shape[1:]), requires_grad=True)
        optimizer = torch.optim.SGD([delta], lr=self.step_size, momentum=0.9)
        grad_norm = None
        for _ in range(self.max_steps):
            y_prob = model(inputs + delta)
            loss = F.nll_loss(torch.log(y_prob.clamp(min=1e-20)), labels)
            optimizer.zero_grad()
            loss.backward()
            if delta.grad is None:
                break
            grad_norm = delta.grad.norm()
            delta.grad.div_(grad_norm)
            optimizer.step()
            delta.data.add_(inputs).clamp_(0, 1).sub_(inputs)
        return inputs + delta, loss, grad_norm


model = DiffusionRobustModel().eval()
attack = SmoothInv(max_steps=3, step_size=0.1)
image = torch.rand(1, 3, 8, 8)
target = torch.tensor([2])
adv, loss, grad_norm = attack.synthesize(model, image, target)
print("loss", round(loss.item(), 4))
print("delta grad norm", None if grad_norm is None else round(grad_norm.item(), 4))
print("perturbation norm", round((adv - image).norm().item(), 4))
