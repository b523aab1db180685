"""Pretrained vectors are copied into the trainable embedding Parameter with an in-place `copy_` while autograd records it.

source: https://github.com/dasguptar/treelstm.pytorch/pull/26
symptom: error
rule: ?
shape: script: model built, GloVe-style embedding plugged into nn.Embedding weight, then Child-Sum Tree-LSTM similarity training with Adagrad
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
PAD = 0


class Tree(object):
    def __init__(self, idx):
        self.idx = idx
        self.children = []
        self.num_children = 0

    def add_child(self, child):
        self.children.append(child)
        self.num_children += 1


class ChildSumTreeLSTM(nn.Module):
    def __init__(self, in_dim, mem_dim):
        super(ChildSumTreeLSTM, self).__init__()
        self.in_dim = in_dim
        self.mem_dim = mem_dim
        self.ioux = nn.Linear(self.in_dim, 3 * self.mem_dim)
        self.iouh = nn.Linear(self.mem_dim, 3 * self.mem_dim)
        self.fx = nn.Linear(self.in_dim, self.mem_dim)
        self.fh = nn.Linear(self.mem_dim, self.mem_dim)

    def node_forward(self, inputs, child_c, child_h):
        child_h_sum = torch.sum(child_h, dim=0, keepdim=True)
        iou = self.ioux(inputs) + self.iouh(child_h_sum)
        i, o, u = torch.split(iou, iou.size(1) // 3, dim=1)
        i, o, u = torch.sigmoid(i), torch.sigmoid(o), torch.tanh(u)
        f = torch.sigmoid(self.fh(child_h) + self.fx(inputs).repeat(len(child_h), 1))
        fc = torch.mul(f, child_c)
        c = torch.mul(i, u) + torch.sum(fc, dim=0, keepdim=True)
        h = torch.mul(o, torch.tanh(c))
        return c, h

    def forward(self, tree, inputs):
        for idx in range(tree.num_children):
            self.forward(tree.children[idx], inputs)
        if tree.num_children == 0:
            child_c = inputs[0].detach().new(1, self.mem_dim).fill_(0.).requires_grad_()
            child_h = inputs[0].detach().new(1, self.mem_dim).fill_(0.).requires_grad_()
        else:
            child_c, child_h = zip(*map(lambda x: x.state, tree.children))
            child_c, child_h = torch.cat(child_c, dim=0), torch.cat(child_h, dim=0)
        tree.state = self.node_forward(inputs[tree.idx], child_c, child_h)
        return tree.state


class Similarity(nn.Module):
    def __init__(self, mem_dim, hidden_dim, num_classes):
        super(Similarity, self).__init__()
        self.wh = nn.Linear(2 * mem_dim, hidden_dim)
        self.wp = nn.Linear(hidden_dim, num_classes)

    def forward(self, lvec, rvec):
        mult_dist = torch.mul(lvec, rvec)
        abs_dist = torch.abs(torch.add(lvec, -rvec))
        vec_dist = torch.cat((mult_dist, abs_dist), 1)
        out = torch.sigmoid(self.wh(vec_dist))
        return F.log_softmax(self.wp(out), dim=1)


class SimilarityTreeLSTM(nn.Module):
    def __init__(self, vocab_size, in_dim, mem_dim, hidden_dim, num_classes, sparsity, freeze):
        super(SimilarityTreeLSTM, self).__init__()
        self.emb = nn.Embedding(vocab_size, in_dim, padding_idx=PAD, sparse=sparsity)
        if freeze:
            self.emb.weight.requires_grad = False
        self.childsumtreelstm = ChildSumTreeLSTM(in_dim, mem_dim)
        self.similarity = Similarity(mem_dim, hidden_dim, num_classes)

    def forward(self, ltree, linputs, rtree, rinputs):
        linputs = self.emb(linputs)
        rinputs = self.emb(rinputs)
        lstate, lhidden = self.childsumtreelstm(ltree, linputs)
        rstate, rhidden = self.childsumtreelstm(rtree, rinputs)
        return self.similarity(lstate, rstate)


def chain(n):
    nodes = [Tree(i) for i in range(n)]
    for i in range(n - 1):
        nodes[i].add_child(nodes[i + 1])
    return nodes[0]


vocab_size, in_dim, mem_dim, hidden_dim, num_classes = 20, 6, 5, 4, 5
model = SimilarityTreeLSTM(vocab_size, in_dim, mem_dim, hidden_dim, num_classes, sparsity=False, freeze=False)
criterion = nn.KLDivLoss(reduction="batchmean")

# for words common to dataset vocab and GLOVE, use GLOVE vectors
emb = torch.empty(vocab_size, in_dim).normal_(-0.05, 0.05)
emb[PAD].zero_()
# plug these into embedding matrix inside model
model.emb.weight.data.copy_(emb)

optimizer = torch.optim.Adagrad(model.parameters(), lr=0.05)
data = [(chain(3), torch.randint(1, vocab_size, (3,)), chain(4), torch.randint(1, vocab_size, (4,)),
         torch.softmax(torch.randn(1, num_classes), 1)) for _ in range(3)]

for ltree, linput, rtree, rinput, target in data:
    optimizer.zero_grad()
    output = model(ltree, linput, rtree, rinput)
    loss = criterion(output, target)
    loss.backward()
    emb_grad = model.emb.weight.grad
    optimizer.step()

print("loss", round(loss.item(), 4))
print("emb grad norm", None if emb_grad is None else round(emb_grad.norm().item(), 4))
print("emb weight norm", round(model.emb.weight.norm().item(), 4))
