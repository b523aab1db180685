# The correct examples of seed 003.
import torch
from torch import nn

a = torch.tensor(1.0, requires_grad=True)
a.backward()

a = torch.tensor([1., 2., 3.], requires_grad=True)
b = torch.tensor([1., 2., 3.], requires_grad=True)
out = a.cos()
out.sum().backward()  # backward方法更新了计算图中所有与out相关的tensor的grad属性
print(a.grad, b.grad)


class Model(torch.nn.Module):
    def __init__(self, in_feature=1, out_feature=3):
        super().__init__()
        self.line_layer = nn.Linear(in_features=in_feature, out_features=out_feature)

    def forward(self, x):
        x = self.line_layer(x)
        return x


model = Model(in_feature=1, out_feature=3)
x = torch.randn(2, 1)
y_pred = model(x)
label = torch.tensor([0, 0]).unsqueeze(dim=1).long()


def loss_fn(model_out, label):
    _mean = (model_out - label).mean()
    return _mean


loss = loss_fn(y_pred, label)
loss.backward()

batch_size = 4
x = torch.randn(batch_size, 3, requires_grad=True)
e = torch.exp(x - x.max())
rows = [e[i] / e[i].sum() for i in range(batch_size)]
probs = torch.stack(rows)
probs.sum().backward()
