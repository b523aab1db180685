"""Bigram model: the forward pass runs once, then backward + update are repeated on that same graph

source: https://github.com/karpathy/nn-zero-to-hero/issues/31
symptom: error
rule: GF401
shape: notebook-style gradient descent: `logits = xenc @ W`, softmax by hand, `W.grad = None; loss.backward(); W.data += -0.1 * W.grad` repeated
wrong: retain-graph
why: keeps the single forward pass and retains its graph, so every step reuses the first step's saved softmax and the loss never reflects the updated W
"""
import torch
import torch.nn.functional as F

words = ["emma", "olivia", "ava"]
chars = sorted(list(set("".join(words))))
stoi = {s: i + 1 for i, s in enumerate(chars)}
stoi["."] = 0
xs, ys = [], []
for w in words:
    chs = ["."] + list(w) + ["."]
    for ch1, ch2 in zip(chs, chs[1:]):
        xs.append(stoi[ch1])
        ys.append(stoi[ch2])
xs = torch.tensor(xs)
ys = torch.tensor(ys)
num = xs.nelement()

g = torch.Generator().manual_seed(2147483647)
W = torch.randn((27, 27), generator=g, requires_grad=True)
xenc = F.one_hot(xs, num_classes=27).float()

#Forward Pass
logits = (xenc @ W)
counts = logits.exp()
prob = counts/counts.sum(1,keepdims=True)
loss = - prob[torch.arange(num),ys].log().mean()

for k in range(5):
    #Backward Pass
    W.grad=None
    loss.backward(retain_graph=True)

    #update the weights
    W.data += -0.1 * W.grad

print(round(loss.item(), 4), round(W.norm().item(), 4))
