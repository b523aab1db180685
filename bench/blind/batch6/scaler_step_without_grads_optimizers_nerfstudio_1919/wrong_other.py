"""The Optimizers wrapper steps every parameter group's optimizer through the GradScaler, but the proposal network gets no gradient on iterations where it is not used, so grad_scaler.step fails with "No inf checks were recorded for this optimizer".

source: https://github.com/nerfstudio-project/nerfstudio/pull/1919
symptom: error
rule: ?
shape: NeRF library: Optimizers class (one Adam per parameter group, GradScaler, unscale + clip, step all), field and proposal-network modules, proposal network used only on some iterations
wrong: other
why: zeroes gradients to zero tensors instead of None so every optimizer has something to step; Adam's momentum then keeps moving the proposal network on iterations where it got no gradient
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


class Optimizers:
    def __init__(self, param_groups, lr=1e-2, max_norm=1.0):
        self.parameters = param_groups
        self.optimizers = {k: torch.optim.Adam(v, lr=lr) for k, v in param_groups.items()}
        self.max_norm = max_norm

    def zero_grad_all(self):
        for opt in self.optimizers.values():
            opt.zero_grad(set_to_none=False)

    def optimizer_scaler_step_all(self, grad_scaler):
        for param_group, optimizer in self.optimizers.items():
            grad_scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(self.parameters[param_group], self.max_norm)
            grad_scaler.step(optimizer)


field = nn.Sequential(nn.Linear(3, 16), nn.ReLU(), nn.Linear(16, 4))
proposal = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 1))
optimizers = Optimizers({"fields": list(field.parameters()), "proposal_networks": list(proposal.parameters())})
scaler = torch.amp.GradScaler("cpu", init_scale=256.0)
p0 = proposal[0].weight.detach().clone()
x, y = torch.randn(64, 3), torch.randn(64, 4)
for step in range(4):
    optimizers.zero_grad_all()
    out = field(x)
    loss = (out - y).pow(2).mean()
    if step % 2 == 0:  # the proposal sampler is only trained on some iterations
        loss = loss + (proposal(x) - out[:, :1].detach()).pow(2).mean()
    scaler.scale(loss).backward()
    optimizers.optimizer_scaler_step_all(scaler)
    scaler.update()
print("loss", round(loss.item(), 4))
print("field weight", round(field[0].weight.norm().item(), 4))
print("proposal change", round((proposal[0].weight - p0).norm().item(), 4))
