"""With AMP on, the FixMatch trainer clips the gradient norm right after scaler.scale(loss).backward(), i.e. on gradients still multiplied by the loss scale, so clipping shrinks every update by the scale factor and the model barely moves.

source: https://github.com/TorchSSL/TorchSSL/pull/59
symptom: silent
rule: ?
shape: FixMatch trainer class (supervised + pseudo-label consistency loss, GradScaler, gradient clipping, scheduler), a few train steps
wrong: other
why: moves the clipping after scaler.step(), so the update is taken with the unclipped (unscaled) gradients and the clip only touches gradients that are about to be zeroed
"""
import torch
from torch import nn
import torch.nn.functional as F

torch.manual_seed(0)


def consistency_loss(logits_s, logits_w, p_cutoff):
    pseudo = torch.softmax(logits_w.detach(), dim=-1)
    max_probs, max_idx = pseudo.max(dim=-1)
    mask = max_probs.ge(p_cutoff).float()
    return (F.cross_entropy(logits_s, max_idx, reduction="none") * mask).mean(), mask.mean()


class FixMatch:
    def __init__(self, model, lambda_u=1.0, p_cutoff=0.3, clip=0.5, amp=True):
        self.model = model
        self.lambda_u, self.p_cutoff, self.clip, self.amp = lambda_u, p_cutoff, clip, amp
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=10)
        self.scaler = torch.amp.GradScaler("cpu", enabled=amp)

    def train_step(self, x_lb, y_lb, x_ulb_w, x_ulb_s):
        num_lb = x_lb.shape[0]
        logits = self.model(torch.cat((x_lb, x_ulb_w, x_ulb_s)))
        logits_x_lb = logits[:num_lb]
        logits_x_ulb_w, logits_x_ulb_s = logits[num_lb:].chunk(2)
        sup_loss = F.cross_entropy(logits_x_lb, y_lb)
        unsup_loss, mask = consistency_loss(logits_x_ulb_s, logits_x_ulb_w, self.p_cutoff)
        total_loss = sup_loss + self.lambda_u * unsup_loss
        if self.amp:
            self.scaler.scale(total_loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
            if self.clip > 0:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
        else:
            total_loss.backward()
            if self.clip > 0:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
            self.optimizer.step()
        self.scheduler.step()
        self.model.zero_grad()
        return total_loss.detach()


model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 4))
trainer = FixMatch(model)
w0 = model[0].weight.detach().clone()
x_lb, y_lb = torch.randn(8, 10), torch.randint(0, 4, (8,))
x_ulb = torch.randn(16, 10)
for it in range(5):
    loss = trainer.train_step(x_lb, y_lb, x_ulb + 0.05 * torch.randn_like(x_ulb), x_ulb + 0.3 * torch.randn_like(x_ulb))
print("loss", round(loss.item(), 4))
print("layer0 weight change", round((model[0].weight - w0).norm().item(), 4))
print("layer2 weight norm", round(model[2].weight.norm().item(), 4))
