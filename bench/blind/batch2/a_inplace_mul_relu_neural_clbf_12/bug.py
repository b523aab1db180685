"""The CLBF descent loss masks the ReLU violation with `violation *= condition_active`, overwriting the ReLU output that autograd saved for backward.

source: https://github.com/MIT-REALM/neural_clbf/pull/12
symptom: error
rule: ?
shape: controller class (learned CLBF value net and policy net, Lie derivatives via torch.autograd.grad(create_graph=True), descent loss over scenarios with linearized and simulated terms, component losses summed), Adam training loop
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class ControlAffineSystem:
    n_dims = 2
    n_controls = 1
    dt = 0.05

    def control_affine_dynamics(self, x, params):
        theta, theta_dot = x[:, 0], x[:, 1]
        f = torch.stack([theta_dot, params["g"] * torch.sin(theta) - params["b"] * theta_dot], dim=1)
        g = torch.zeros(x.shape[0], self.n_dims, self.n_controls)
        g[:, 1, 0] = 1.0
        return f, g

    def closed_loop_dynamics(self, x, u, params):
        f, g = self.control_affine_dynamics(x, params)
        return f + torch.bmm(g, u.unsqueeze(-1)).squeeze(-1)


class NeuralCLBFController(nn.Module):
    def __init__(self, dynamics_model, scenarios, clf_lambda=1.0, safe_level=1.0):
        super().__init__()
        self.dynamics_model = dynamics_model
        self.scenarios = scenarios
        self.n_scenarios = len(scenarios)
        self.clf_lambda = clf_lambda
        self.safe_level = safe_level
        self.controller_period = dynamics_model.dt
        self.V_nn = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh())
        self.u_nn = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 1))

    def V(self, x):
        return 0.5 * (self.V_nn(x) ** 2).sum(dim=1)

    def u(self, x):
        return self.u_nn(x)

    def V_lie_derivatives(self, x):
        x = x.requires_grad_(True) if not x.requires_grad else x
        gradV = torch.autograd.grad(self.V(x).sum(), x, create_graph=True)[0]
        Lf_V, Lg_V = [], []
        for s in self.scenarios:
            f, g = self.dynamics_model.control_affine_dynamics(x, s)
            Lf_V.append((gradV * f).sum(dim=1, keepdim=True))
            Lg_V.append(torch.bmm(gradV.unsqueeze(1), g).squeeze(1))
        return torch.stack(Lf_V, dim=1), torch.stack(Lg_V, dim=1)

    def descent_loss(self, x):
        loss = []
        eps = 0.1
        V = self.V(x)
        condition_active = torch.sigmoid(10 * (self.safe_level + eps - V))
        u = self.u(x)

        eps = 1.0
        clbf_descent_term_lin = torch.tensor(0.0).type_as(x)
        Lf_V, Lg_V = self.V_lie_derivatives(x)
        for i, s in enumerate(self.scenarios):
            Vdot = Lf_V[:, i, :].unsqueeze(1) + torch.bmm(Lg_V[:, i, :].unsqueeze(1), u.reshape(-1, 1, 1))
            Vdot = Vdot.reshape(V.shape)
            violation = F.relu(eps + Vdot + self.clf_lambda * V)
            violation *= condition_active  # bench: bug
            clbf_descent_term_lin += violation.mean()  # bench: bug
        loss.append(("CLBF descent term (linearized)", clbf_descent_term_lin))

        clbf_descent_term_sim = torch.tensor(0.0).type_as(x)
        for s in self.scenarios:
            xdot = self.dynamics_model.closed_loop_dynamics(x, u, params=s)
            x_next = x + self.dynamics_model.dt * xdot
            V_next = self.V(x_next)
            violation = F.relu(eps + (V_next - V) / self.controller_period + self.clf_lambda * V)
            violation *= condition_active  # bench: bug
            clbf_descent_term_sim += violation.mean()  # bench: bug
        loss.append(("CLBF descent term (simulated)", clbf_descent_term_sim))
        return loss

    def initial_loss(self, x):
        goal = torch.zeros(1, 2)
        return [("CLBF goal term", self.V(goal).mean())]

    def training_step(self, x):
        component_losses = {}
        component_losses.update(self.initial_loss(x))  # bench: bug
        component_losses.update(self.descent_loss(x))
        total_loss = torch.tensor(0.0).type_as(x)
        for _, loss_value in component_losses.items():
            if not torch.isnan(loss_value):
                total_loss += loss_value  # bench: bug
        return total_loss, component_losses


scenarios = [{"g": 9.8, "b": 0.1}, {"g": 9.8, "b": 0.3}]
controller = NeuralCLBFController(ControlAffineSystem(), scenarios)
opt = torch.optim.Adam(controller.parameters(), lr=1e-3)

for step in range(3):
    x = (torch.rand(64, 2) - 0.5) * 2.0
    opt.zero_grad()
    total_loss, parts = controller.training_step(x)
    total_loss.backward()
    opt.step()

print("loss", round(total_loss.item(), 4))
print("V grad norm", round(controller.V_nn[0].weight.grad.norm().item(), 4))
print("u grad norm", round(controller.u_nn[0].weight.grad.norm().item(), 4))
