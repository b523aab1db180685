"""The custom autograd.Function for the total score returns the arc posteriors as the gradient without multiplying by the incoming gradient, so any weighting or sign applied to the total scores is lost.

source: https://github.com/k2-fsa/k2/issues/341
symptom: silent
rule: ?
shape: custom torch.autograd.Function (forward/backward over an FSA batch) inside a training loop; loss = -(tot_scores / num_frames).sum(), Adam
wrong: other
why: multiplying by the summed incoming gradient fixes the sign but gives every arc the total of all utterances' weights instead of its own utterance's 1/num_frames, so the gradient is wrongly scaled per utterance.
"""
from typing import Tuple

import torch
import torch.nn as nn

torch.manual_seed(0)


class Fsa(object):
    """A batch of 'sausage' FSAs: each FSA is a chain of steps, each step has parallel arcs."""

    def __init__(self, scores, arc_to_fsa, arc_to_step, num_fsas, num_steps):
        self.scores = scores
        self.arc_to_fsa = arc_to_fsa
        self.arc_to_step = arc_to_step
        self.num_fsas = num_fsas
        self.num_steps = num_steps

    def _step_logsumexp(self):
        s = self.scores.detach()
        m = torch.full((self.num_steps,), -float('inf')).scatter_reduce(0, self.arc_to_step, s, reduce='amax')
        e = torch.zeros(self.num_steps).index_add_(0, self.arc_to_step, (s - m[self.arc_to_step]).exp())
        return m + e.log()

    def get_tot_scores_log(self):
        step_tot = self._step_logsumexp()
        step_to_fsa = torch.zeros(self.num_steps, dtype=torch.long).index_copy_(0, self.arc_to_step, self.arc_to_fsa)
        return torch.zeros(self.num_fsas).index_add_(0, step_to_fsa, step_tot)

    def get_arc_scores(self):
        # log arc posteriors: arc score minus the total of its step
        return self.scores.detach() - self._step_logsumexp()[self.arc_to_step]


class _GetTotScoresFunction(torch.autograd.Function):

    @staticmethod
    def forward(ctx, fsas: Fsa, log_semiring: bool, use_float_scores: bool,
                unused_scores: torch.Tensor) -> torch.Tensor:
        tot_scores = fsas.get_tot_scores_log().detach()
        ctx.fsas = fsas
        ctx.log_semiring = log_semiring
        ctx.use_float_scores = use_float_scores
        ctx.save_for_backward(unused_scores)
        return tot_scores

    @staticmethod
    def backward(ctx, tot_scores_grad: torch.Tensor) -> Tuple[None, None, None, torch.Tensor]:
        fsas = ctx.fsas
        scores, = ctx.saved_tensors
        arc_scores = fsas.get_arc_scores()
        return None, None, None, arc_scores.exp() * tot_scores_grad.sum()


def get_tot_scores(fsas: Fsa, log_semiring: bool, use_float_scores: bool) -> torch.Tensor:
    return _GetTotScoresFunction.apply(fsas, log_semiring, use_float_scores, fsas.scores)


# three utterances, each a sausage of num_frames steps with 4 parallel arcs (one per output symbol)
num_frames = torch.tensor([3, 5, 2])
arc_to_fsa, arc_to_step = [], []
step = 0
for u, n in enumerate(num_frames.tolist()):
    for t in range(n):
        arc_to_fsa += [u] * 4
        arc_to_step += [step] * 4
        step += 1
arc_to_fsa = torch.tensor(arc_to_fsa)
arc_to_step = torch.tensor(arc_to_step)
num_steps = step

nnet = nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 4))
optimizer = torch.optim.Adam(nnet.parameters(), lr=1e-2)
feats = torch.randn(num_steps, 6)
allowed = torch.rand(num_steps, 4) > 0.4  # supervision: arcs allowed by the transcript
allowed[:, 0] = True

for it in range(3):
    optimizer.zero_grad()
    log_probs = nnet(feats).log_softmax(-1)
    arc_scores = log_probs.masked_fill(~allowed, -30.0).reshape(-1)
    fsas = Fsa(arc_scores, arc_to_fsa, arc_to_step, len(num_frames), num_steps)
    tot_scores = get_tot_scores(fsas, log_semiring=True, use_float_scores=True)
    loss = -(tot_scores / num_frames).sum()
    loss.backward()
    grad_norm = torch.cat([p.grad.flatten() for p in nnet.parameters()]).norm()
    optimizer.step()

print("loss", round(loss.item(), 4))
print("grad norm", round(grad_norm.item(), 4))
print("output layer grad norm", round(nnet[2].weight.grad.norm().item(), 4))
