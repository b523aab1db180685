import torch

import gradfix.trace.tracer as tracer


def broken(*args):
    raise KeyError("a bug in the tracer")


tracer.Tracer._after_op = broken  # every op with a grad_fn now breaks the instrumentation
w = torch.randn(3, requires_grad=True)
y = (w * 2).sum()
print("ran with a broken tracer")
raise ValueError("the program's own error")
