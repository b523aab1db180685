"""The training loop calls optimizer.zero_grad() inside the micro-batch loop, so each micro-batch wipes the gradients accumulated before it and the optimizer step only uses the last micro-batch (scaled by 1/grad_accum).

source: https://github.com/bytetriper/RAE/issues/67
symptom: silent
rule: ?
shape: training script: decoder model trained with gradient accumulation (inner loop over micro-batches, loss / grad_accum, backward), clip_grad_norm_ and AdamW step per outer step
"""
import torch
import torch.nn as nn

torch.manual_seed(0)

model = nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 8))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
grad_accum = 4
latents = torch.randn(2, grad_accum, 16, 8)
targets = torch.randn(2, grad_accum, 16, 8)
for step in range(2):
    optimizer.zero_grad(set_to_none=True)
    for micro in range(grad_accum):
        recon = model(latents[step, micro])
        loss = nn.functional.mse_loss(recon, targets[step, micro]) / grad_accum
        loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=10.0)
    optimizer.step()
print("loss", round(loss.item() * grad_accum, 4))
print("grad norm", round(grad_norm.item(), 4))
print("weight sum", round(model[0].weight.sum().item(), 4))
