"""torch.log1p(a)[a > -1] excludes a = -1 from the sum, yet its gradient is nan instead of 0

source: https://github.com/pytorch/pytorch/issues/152088
symptom: nan-grad
rule: GF301
shape: helper function test_bug(): mask indexing applied after log1p
wrong: clamp-eps
why: shifts the argument of log1p by an eps so log1p(-1) is finite, which biases the kept values and their gradients
"""
import torch
def test_bug():
    a = torch.tensor([-1.0, 0.5, 1.0], requires_grad=True)
    l = torch.log1p(a + 1e-3)[a > -1].sum()  # This will include only a[1] and a[2]
    l.backward()
    print(a.grad)
if __name__ == "__main__":
    test_bug()
