"""The tracker's ID classifier and the uncertainty loss weights live in the loss module, but the trainer builds the optimizer from the model's parameters only, so they are never optimised.

source: https://github.com/ifzhang/FairMOT/issues/125
symptom: no-training
rule: ?
shape: trainer class holding a detection+embedding model and a MotLoss nn.Module (ID classifier Linear, learned s_det/s_id weights), Adam built from model.parameters()
"""
import math
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class MotLoss(nn.Module):
    def __init__(self, emb_dim=8, nID=5):
        super().__init__()
        self.classifier = nn.Linear(emb_dim, nID)
        self.emb_scale = math.sqrt(2) * math.log(nID - 1)
        self.s_det = nn.Parameter(-1.85 * torch.ones(1))
        self.s_id = nn.Parameter(-1.05 * torch.ones(1))

    def forward(self, outputs, hm_target, ids):
        det_loss = F.mse_loss(outputs["hm"].sigmoid(), hm_target)
        id_head = self.emb_scale * F.normalize(outputs["id"], dim=1)
        id_loss = F.cross_entropy(self.classifier(id_head), ids)
        return torch.exp(-self.s_det) * det_loss + torch.exp(-self.s_id) * id_loss + (self.s_det + self.s_id)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Linear(6, 16)
        self.hm = nn.Linear(16, 1)
        self.id = nn.Linear(16, 8)

    def forward(self, x):
        f = torch.relu(self.backbone(x))
        return {"hm": self.hm(f), "id": self.id(f)}


class MotTrainer:
    def __init__(self, model, lr=0.01):
        self.model = model
        self.loss = MotLoss()
        self.optimizer = torch.optim.Adam(model.parameters(), lr)
        self.optimizer.add_param_group({"params": self.loss.parameters()})

    def run_step(self, x, hm, ids):
        self.optimizer.zero_grad()
        loss = self.loss(self.model(x), hm, ids)
        loss.backward()
        self.optimizer.step()
        return loss


trainer = MotTrainer(Net())
c0 = trainer.loss.classifier.weight.detach().clone()
x, hm, ids = torch.randn(32, 6), torch.rand(32, 1), torch.randint(0, 5, (32,))
for step in range(10):
    loss = trainer.run_step(x, hm, ids)
print("loss", round(loss.item(), 4))
print("classifier change", round((trainer.loss.classifier.weight - c0).norm().item(), 4))
print("s_det", round(trainer.loss.s_det.item(), 4), "s_id", round(trainer.loss.s_id.item(), 4))
