"""OwlViT class head normalises its embeddings in place (`/=`) by a norm computed from them

source: https://github.com/huggingface/transformers/pull/24529
symptom: error
rule: GF204
shape: nn.Module forward of a detection head: `image_class_embeds /= torch.linalg.norm(image_class_embeds, ...) + 1e-6`
wrong: detach
why: divides by detached norms, so the gradient through the L2 normalisation is dropped
"""
from typing import Optional, Tuple

import torch
from torch import nn


class OwlViTClassPredictionHead(nn.Module):
    def __init__(self, vision_hidden, text_hidden):
        super().__init__()

        out_dim = text_hidden
        self.query_dim = vision_hidden

        self.dense0 = nn.Linear(self.query_dim, out_dim)
        self.logit_shift = nn.Linear(self.query_dim, 1)
        self.logit_scale = nn.Linear(self.query_dim, 1)
        self.elu = nn.ELU()

    def forward(
        self,
        image_embeds: torch.FloatTensor,
        query_embeds: Optional[torch.FloatTensor],
        query_mask: Optional[torch.Tensor],
    ) -> Tuple[torch.FloatTensor]:
        image_class_embeds = self.dense0(image_embeds)

        # Normalize image and text features
        image_class_embeds = image_class_embeds / (torch.linalg.norm(image_class_embeds, dim=-1, keepdim=True).detach() + 1e-6)
        query_embeds = query_embeds / (torch.linalg.norm(query_embeds, dim=-1, keepdim=True).detach() + 1e-6)

        # Get class predictions
        pred_logits = torch.einsum("...pd,...qd->...pq", image_class_embeds, query_embeds)

        # Apply a learnable shift and scale to logits
        logit_shift = self.logit_shift(image_embeds)
        logit_scale = self.logit_scale(image_embeds)
        logit_scale = self.elu(logit_scale) + 1
        pred_logits = (pred_logits + logit_shift) * logit_scale

        if query_mask is not None:
            if query_mask.ndim > 1:
                query_mask = torch.unsqueeze(query_mask, dim=-2)

            pred_logits = pred_logits.to(torch.float64)
            pred_logits = torch.where(query_mask == 0, -1e6, pred_logits)
            pred_logits = pred_logits.to(torch.float32)

        return (pred_logits, image_class_embeds)


torch.manual_seed(0)
text_projection = nn.Linear(12, 8)
head = OwlViTClassPredictionHead(vision_hidden=16, text_hidden=8)
image_embeds = torch.randn(2, 5, 16)
query_embeds = text_projection(torch.randn(2, 3, 12))
query_mask = torch.ones(2, 3)
pred_logits, _ = head(image_embeds, query_embeds, query_mask)
loss = pred_logits.sigmoid().mean()
loss.backward()
print(round(loss.item(), 4), round(head.dense0.weight.grad.norm().item(), 4), round(text_projection.weight.grad.norm().item(), 4))
