"""MAML inner step takes torch.autograd.grad(loss, fast_weights) without create_graph=True: the meta-gradient silently drops the second-order term

source: https://github.com/dragen1860/MAML-Pytorch/issues/26
symptom: wrong-value
rule: none
shape: Meta learner: functional net(x, vars), inner-loop update of fast_weights, query loss backpropagated to the meta parameters
wrong: retain-graph
why: passes retain_graph=True instead of create_graph=True, so the inner gradient is still a constant and the meta-gradient misses the second-order term
"""
import torch
import torch.nn.functional as F

torch.manual_seed(0)
vars = [torch.randn(4, 3, requires_grad=True), torch.zeros(4, requires_grad=True)]
update_lr = 0.4


def net(x, params):
    return torch.tanh(F.linear(x, params[0], params[1]))


x_spt, y_spt = torch.randn(5, 3), torch.randn(5, 4)
x_qry, y_qry = torch.randn(5, 3), torch.randn(5, 4)

logits = net(x_spt, vars)
loss = F.mse_loss(logits, y_spt)
grad = torch.autograd.grad(loss, vars, retain_graph=True)
fast_weights = list(map(lambda p: p[1] - update_lr * p[0], zip(grad, vars)))

logits_q = net(x_qry, fast_weights)
loss_q = F.mse_loss(logits_q, y_qry)
loss_q.backward()
print("query loss:", round(loss_q.item(), 4))
print("meta grad norm:", round(vars[0].grad.norm().item(), 4))
