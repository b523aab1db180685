"""The NFW lens picks between the r > 1 and r < 1 formulas with `torch.where`, but both branches are evaluated everywhere, so the sqrt of a negative number in the unused branch turns the gradient of the fitted lens parameters into NaN.

source: https://github.com/Ciela-Institute/caustics/pull/83
symptom: nan-grad
rule: ?
shape: nn.Module lens model (static helper with nested torch.where, deflection-angle method) fitted to synthetic deflections with Adam
"""

from math import pi

import torch
import torch.nn as nn

torch.manual_seed(0)


class NFW(nn.Module):
    def __init__(self, log_rs=0.0, log_rho=0.0, use_case="batchable"):
        super().__init__()
        self.log_rs = nn.Parameter(torch.tensor(log_rs))
        self.log_rho = nn.Parameter(torch.tensor(log_rho))
        self.s = 0.0
        if use_case == "batchable":
            self._h = self._h_batchable
        else:
            raise ValueError("use case should be one of: batchable")

    @staticmethod
    def _h_batchable(x):
        """Helper method for computing reduced deflection angles."""
        term_1 = (x / 2).log()
        term_2 = torch.where(  # bench: bug
            x > 1,
            term_1 + (1 / x).arccos() * 1 / (x**2 - 1).sqrt(),
            torch.where(
                x < 1,
                term_1 + (1 / x).arccosh() * 1 / (1 - x**2).sqrt(),
                1.0 + torch.tensor(1 / 2).log(),
            ),
        )
        return term_2

    def reduced_deflection_angle(self, x, y):
        th = (x**2 + y**2).sqrt() + self.s
        scale_radius = self.log_rs.exp()
        r = th / scale_radius
        deflection_angle = 4 * pi * self.log_rho.exp() * scale_radius**3 * self._h(r) / th
        return deflection_angle * x / th, deflection_angle * y / th


grid = torch.linspace(-2.05, 2.05, 12)
x, y = torch.meshgrid(grid, grid, indexing="xy")
with torch.no_grad():
    ax_obs, ay_obs = NFW(log_rs=0.2, log_rho=-0.3).reduced_deflection_angle(x, y)
    ax_obs = ax_obs + 0.01 * torch.randn_like(ax_obs)

lens = NFW()
opt = torch.optim.Adam(lens.parameters(), lr=0.05)
for step in range(5):
    opt.zero_grad()
    ax, ay = lens.reduced_deflection_angle(x, y)
    loss = ((ax - ax_obs) ** 2 + (ay - ay_obs) ** 2).mean()
    loss.backward()
    opt.step()

print("loss", round(loss.item(), 4))
print("log_rs grad", round(lens.log_rs.grad.item(), 4))
print("log_rho grad", round(lens.log_rho.grad.item(), 4))
print("log_rs", round(lens.log_rs.item(), 4))
