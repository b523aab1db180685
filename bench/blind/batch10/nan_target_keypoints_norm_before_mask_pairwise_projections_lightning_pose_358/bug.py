"""The pairwise-projection loss takes the L2 norm of (target - prediction) before dropping the keypoints whose 3D target is NaN, so the masked-out NaN entries still send NaN through the norm's backward into the predictions and the network weights.

source: https://github.com/paninski-lab/lightning-pose/pull/358
symptom: nan-grad
rule: ?
shape: pose-estimation model (2D keypoints per camera, fixed linear triangulation per camera pair), supervised 2D loss plus a 3D loss class with NaN masking via masked_select, Adam training loop over several steps
"""
import itertools

import torch
import torch.nn as nn

torch.manual_seed(0)


class Loss:
    def __init__(self, log_weight=0.0):
        self.weight = 10 ** log_weight

    def reduce_loss(self, loss, method="mean"):
        return torch.mean(loss)

    def log_loss(self, loss, stage):
        return [{"name": f"{stage}_{self.loss_name}_loss", "value": loss.detach()}]


class PairwiseProjectionsLoss(Loss):
    """Penalize projections from each pair of cameras into 3D world space."""

    def __init__(self, log_weight=0.0, **kwargs):
        super().__init__(log_weight=log_weight)
        self.loss_name = "pairwise_projections"

    def remove_nans(self, loss):
        mask = ~torch.isnan(loss)
        if mask.sum() == 0.0:
            return torch.tensor(0.0, device=loss.device, dtype=loss.dtype)
        else:
            return torch.masked_select(loss, ~torch.isnan(loss))

    def compute_loss(self, targets, predictions):
        loss = torch.linalg.norm(targets.unsqueeze(1) - predictions, ord=2, dim=-1)  # bench: bug
        return loss

    def __call__(self, keypoints_targ_3d, keypoints_pred_3d, stage=None, **kwargs):
        elementwise_loss = self.compute_loss(
            targets=keypoints_targ_3d,
            predictions=keypoints_pred_3d,
        )
        clean_loss = self.remove_nans(loss=elementwise_loss)
        scalar_loss = self.reduce_loss(clean_loss, method="mean")
        logs = self.log_loss(loss=scalar_loss, stage=stage)
        return self.weight * scalar_loss, logs


class MultiviewKeypointModel(nn.Module):
    def __init__(self, num_cams=3, num_keypoints=4):
        super().__init__()
        self.num_cams, self.num_keypoints = num_cams, num_keypoints
        self.backbone = nn.Sequential(nn.Linear(6, 32), nn.ReLU())
        self.head = nn.Linear(32, num_keypoints * 2)
        self.pairs = list(itertools.combinations(range(num_cams), 2))
        self.register_buffer("tri", torch.randn(4, 3) * 0.5)

    def forward(self, views):  # views: [batch, cams, 6]
        kp2d = self.head(self.backbone(views)).view(views.shape[0], self.num_cams, self.num_keypoints, 2)
        pred3d = [torch.cat([kp2d[:, i], kp2d[:, j]], -1) @ self.tri for i, j in self.pairs]
        return kp2d, torch.stack(pred3d, 1)  # [batch, cam_pairs, keypoints, 3]


model = MultiviewKeypointModel()
loss_fn = PairwiseProjectionsLoss()
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
views = torch.randn(16, 3, 6)
targets = torch.randn(16, 4, 3)
targets[torch.rand(16, 4) < 0.2] = float("nan")  # missing 3D annotations
targets_2d = torch.randn(16, 3, 4, 2)

for step in range(20):
    opt.zero_grad()
    kp2d, pred3d = model(views)
    supervised_loss = ((kp2d - targets_2d) ** 2).mean()
    pairwise_loss, logs = loss_fn(targets, pred3d, stage="train")
    loss = supervised_loss + pairwise_loss
    loss.backward()
    if step == 0:
        grad0 = model.head.weight.grad.norm().item()
    opt.step()
print("loss", round(loss.item(), 4))
print("head_grad_norm_step0", round(grad0, 4))
print("head_weight_norm", round(model.head.weight.norm().item(), 4))
