"""Course homework (HW7 QA fine-tuning): train_loss += output.loss keeps every batch's graph and RAM grows until it runs out

source: https://github.com/pai4451/ML2021/issues/2
symptom: memory-growth
rule: GF403
shape: notebook-style training loop over a dataloader with a model returning output.loss and output logits
wrong: detach
why: detaches the model's loss itself before backpropagating it (re-enabling grad on the copy) so no graph is kept, so backward reaches no parameter and the model never trains
"""
from types import SimpleNamespace

import torch
import torch.nn as nn


class QAModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.qa_outputs = nn.Linear(6, 2)

    def forward(self, input_ids, start_positions, end_positions):
        logits = self.qa_outputs(input_ids)
        start_logits, end_logits = logits[..., 0], logits[..., 1]
        loss = (nn.functional.cross_entropy(start_logits, start_positions)
                + nn.functional.cross_entropy(end_logits, end_positions)) / 2
        return SimpleNamespace(loss=loss, start_logits=start_logits, end_logits=end_logits)


torch.manual_seed(0)
model = QAModel()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
train_loader = [(torch.randn(4, 10, 6), torch.randint(0, 10, (4,)), torch.randint(0, 10, (4,))) for _ in range(8)]

model.train()
step = 1
train_loss = train_acc = 0
for data in train_loader:
    output = model(input_ids=data[0], start_positions=data[1], end_positions=data[2])
    start_index = torch.argmax(output.start_logits, dim=1)
    end_index = torch.argmax(output.end_logits, dim=1)
    train_acc += ((start_index == data[1]) & (end_index == data[2])).float().mean()
    output.loss = output.loss.detach().requires_grad_()
    train_loss += output.loss.detach()
    output.loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    step += 1

print(f"Train | loss = {train_loss.item() / len(train_loader):.3f}, acc = {train_acc / len(train_loader):.3f}")
print("train_loss holds a graph:", torch.is_tensor(train_loss) and train_loss.grad_fn is not None)
