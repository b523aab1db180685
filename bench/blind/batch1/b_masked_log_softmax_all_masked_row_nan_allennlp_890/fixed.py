"""masked_log_softmax adds mask.log() to the logits, so a row whose mask is all zeros becomes all -inf and log_softmax returns nan, which poisons the loss and every gradient.

source: https://github.com/allenai/allennlp/issues/890
symptom: nan-grad
rule: ?
shape: function (masked_log_softmax utility) used by a span-start pointer model over padded passages; one padded instance in the batch is fully masked; training with Adam
"""
import torch
import torch.nn as nn

torch.manual_seed(0)


def masked_log_softmax(vector: torch.Tensor, mask: torch.Tensor, dim: int = -1) -> torch.Tensor:
    if mask is not None:
        mask = mask.float()
        while mask.dim() < vector.dim():
            mask = mask.unsqueeze(1)
        # vector + mask.log() is an easy way to zero out masked elements in logspace, but it
        # results in nans when the whole vector is masked.  We need a very small value instead of a
        # zero in the mask for these cases.  log(1 + 1e-45) is still basically 0, so we can safely
        # just add 1e-45 before calling mask.log().
        vector = vector + (mask + 1e-45).log()
    return torch.nn.functional.log_softmax(vector, dim=dim)


class SpanStartPointer(nn.Module):
    def __init__(self, dim=8):
        super().__init__()
        self.encoder = nn.GRU(dim, dim, batch_first=True)
        self.question_proj = nn.Linear(dim, dim)
        self.span_start_predictor = nn.Linear(dim, 1)

    def forward(self, passage, question, passage_mask):
        encoded, _ = self.encoder(passage)
        q = torch.tanh(self.question_proj(question)).unsqueeze(1)
        logits = self.span_start_predictor(encoded * q).squeeze(-1)
        return masked_log_softmax(logits, passage_mask)


model = SpanStartPointer()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
batch, length = 4, 10
passage = torch.randn(batch, length, 8)
question = torch.randn(batch, 8)
lengths = torch.tensor([10, 7, 4, 0])  # last instance is batch padding: empty passage
passage_mask = (torch.arange(length)[None, :] < lengths[:, None]).long()
instance_mask = (lengths > 0).float()
span_start = torch.tensor([3, 6, 1, 0])

for step in range(3):
    optimizer.zero_grad()
    log_probs = model(passage, question, passage_mask)
    nll = -log_probs.gather(1, span_start[:, None]).squeeze(1)
    loss = (nll * instance_mask).sum() / instance_mask.sum()
    loss.backward()
    grad_norm = torch.cat([p.grad.flatten() for p in model.parameters()]).norm()
    optimizer.step()

print("loss", round(loss.item(), 4))
print("grad norm", round(grad_norm.item(), 4))
print("predictor grad norm", round(model.span_start_predictor.weight.grad.norm().item(), 4))
