"""The edge term computes the image gradient magnitude as torch.sqrt(grad_x**2 + grad_y**2); at flat pixels the radicand is exactly 0 and sqrt's backward (1 / (2 * sqrt(0))) times 0 gives nan, so PowBackward/SqrtBackward return nan and LBFGS breaks.

source: https://openillumi.com/en/en-fix-pytorch-cpu-nan-powbackward0
symptom: nan-grad
rule: ?
shape: flat image-reconstruction script: a learnable image tensor, finite-difference gradients, data term + gradient-magnitude (TV-like) term, torch.optim.LBFGS with a closure, several iterations
wrong: clamp-eps
why: clamping the radicand at 0 only removes negative round-off; at flat pixels it is still exactly 0, so sqrt's infinite derivative still meets a zero upstream gradient and the gradients stay nan.
"""
import torch

torch.manual_seed(0)

clean = torch.zeros(1, 1, 16, 16)
clean[..., 4:12, 4:12] = 1.0
noisy = clean + 0.1 * torch.randn_like(clean)
image = torch.zeros_like(noisy, requires_grad=True)  # flat start
optimizer = torch.optim.LBFGS([image], lr=0.5, max_iter=5)
lam = 0.05


def gradient_magnitude(img):
    grad_x = img[..., :, 1:] - img[..., :, :-1]
    grad_y = img[..., 1:, :] - img[..., :-1, :]
    grad_x = grad_x[..., :-1, :]
    grad_y = grad_y[..., :, :-1]
    return torch.sqrt(torch.clamp(grad_x ** 2 + grad_y ** 2, min=0.0))


def closure():
    optimizer.zero_grad()
    loss = ((image - noisy) ** 2).mean() + lam * gradient_magnitude(image).mean()
    loss.backward()
    return loss


for it in range(3):
    loss = optimizer.step(closure)

print("loss", round(loss.item(), 4))
print("image grad norm", round(image.grad.norm().item(), 4))
print("error to clean", round((image.detach() - clean).abs().mean().item(), 4))
