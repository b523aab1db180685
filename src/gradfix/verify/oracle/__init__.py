"""Decide from two execution traces whether a rewrite is proven (pure Python, no torch).

The comparison is built in layers, each a module of this package over the one below:
:mod:`.common` (tolerances, the verdict, helpers over traces), :mod:`.state` (what one
comparison holds, leaf names), :mod:`.structure` (do the runs line up: outcomes, calls,
leaves), :mod:`.finite_differences` (judging a gradient by finite differences),
:mod:`.references` (each call's forward results and gradients against their reference),
:mod:`.windows` (what each leaf's gradient accumulates between resets, for a change that
regroups the backward calls) and :mod:`.comparison` (the verdict and its evidence).

``compare_traces(before, after, fd)`` takes the JSON traces the runner produced for the
buggy script (BEFORE) and the rewrite (AFTER), plus optional finite-difference estimates,
and returns a :class:`Verdict`:

* ``verified``: AFTER ran without error; every forward result (the roots of each backward
  call, and module-level tensors present in both) equals BEFORE's where BEFORE's is finite;
  every gradient AFTER produced is finite and equals the reference: BEFORE's own autograd
  gradient where that is a finite tensor (unless finite differences show it is not the
  true derivative: a silent graph cut, below), otherwise (BEFORE's backward raised, gave
  ``None`` or non-finite values) a central finite-difference estimate of BEFORE's forward.
* ``rejected``: a forward result changed, AFTER raised, AFTER has a None/nan/inf gradient
  where one is expected, a gradient differs from its reference, or the backward calls or
  leaves do not line up.
* ``unverified``: a script could not run at all (missing module or data file, CUDA,
  timeout, crash), there is nothing to compare, or a needed reference is unavailable.

BEFORE's finite autograd gradient is the reference only while nothing disproves it: a
*silent* graph cut (``torch.tensor([w[0] * 2, ...])``, a stray ``.detach()``) runs and gives
a finite gradient that misses a path, and the fix restores the true derivative. So where
AFTER's gradient of a (backward call, leaf) differs from BEFORE's finite one, those elements
are estimated by finite differences of BEFORE's forward (planned by :func:`plan_fd` like
any other estimate; without them the gradient changed):
AFTER is accepted there only if the estimate agrees with AFTER and disagrees with BEFORE's
autograd gradient (both within the finite-difference tolerance, or the slopes of a kink).
The evidence then lists the elements under ``silent_graph_cuts`` and a note says "before's
autograd gradient differs from finite differences of its forward (a silent graph cut)", and
BEFORE's gradient counts as broken from that call on (see below). If the estimate agrees
with BEFORE's autograd gradient, agrees with neither, is undefined or was not computed,
the gradient changed: ``rejected``. A gradient both versions agree on is never estimated,
so an intentional ``.detach()`` kept by the fix costs nothing; but where an intentional
detach and a repaired cut reach the same element, the estimate (which sees every path)
agrees with neither and the fix is rejected: a conservative answer. A change made by hand
that adds a stop-gradient (``FixIntent.adds_stop_gradient``: a ``.detach()``, ``.data``,
``no_grad`` block or ``requires_grad_(False)`` it spells more of) means a gradient to differ
from the derivative of the forward there (a TD target, an old policy, a buffer held
constant), or does so by mistake: where the estimate sides with BEFORE, that is intent the
run cannot show, and the verdict is ``unverified``, naming the line.

Float32's finite differences cannot tell two gradients a few parts in 10^3 apart (the
second-order term ``create_graph=True`` restores to a meta-gradient): where the estimate
accepts both BEFORE's and AFTER's gradient, the elements were also estimated with the
program run in float64 with the same random values (``instrument.float64_run``,
Richardson's extrapolation of central differences), and that estimate decides, within
rtol 1e-3 plus its noise bound and truncation error; without it the gradient changed. A
program that names float64 itself, or whose float64 run differentiates another value, has
no such estimate. When the finite differences were capped, the elements estimated decide
and the others count as not compared.

A fix whose purpose is to change what trains (a rule's ``fix_changes_training``, passed
in ``intent``: GF109 registers a tensor as an ``nn.Parameter``, and the optimizer built
from ``parameters()`` now steps it) parts from BEFORE's trajectory at the first optimizer
step. The leaves AFTER's optimizer steps between backward calls and BEFORE's never does
(:func:`newly_trained`, by the leaves' version counters) are then held: AFTER is replayed
with their values restored after each ``torch.optim`` step (its finite differences too),
and that replay is compared with BEFORE like any AFTER, at every backward call. The
verdict names the leaves ("leaves now trained: ..."); any other change still rejects.

A leaf that BEFORE cannot reach by any module-level name (or attribute of a module-level
``nn.Module``), while AFTER binds its leaf of the same index, holding the same values, to a
name where BEFORE binds a non-leaf that requires grad
(``w = torch.randn(3, requires_grad=True) * 0.01`` -> ``w = (torch.randn(3) *
0.01).requires_grad_()``), is compared with the gradient BEFORE's backward gave that
non-leaf: the value the user bound, and the only gradient BEFORE's program could have
meant. A leaf BEFORE holds by name always keeps its own gradient as the reference.

Backward calls are matched by order, leaves by creation index. A leaf whose gradient is
``None`` in both versions (after a backward that ran) may still be cut off by the fix (a
``.data`` read in ``forward`` rewritten to ``.detach()``: the layer never trains): finite
differences of AFTER's forward at a few of its elements must then be zero, or the fix is
rejected ("gradient lost: leaf 0 'model.lin.weight' ..."). This holds for every leaf the
program declared (``requires_grad=True``, its own ``nn.Parameter``), and for the weights
torch makes (``nn.Linear``'s) only when the fix is one of a rule whose fix must restore a
gradient (each rule's ``fix_restores_gradient``, passed in ``intent``): other fixes
keep a frozen weight frozen on purpose (a distillation's teacher detached by GF104's
``.detach().clone()``). A leaf that no longer requires grad at the call
(``requires_grad_(False)``) is frozen and never checked. AFTER's ``None`` counts as zero
only against a finite-difference reference; against a gradient BEFORE really produced it
is a lost gradient. A verified reason lists the leaves compared and those not compared,
with why; a leaf that is a parameter of a module the script holds is named by it.

A gradient a backward call gives a leaf that both versions discard unread (the runner's
``discarded``: the leaf's ``.grad`` was reset by ``zero_grad()`` or ``p.grad = None``
before any read, by an optimizer step, the program's code or a hook) has no effect on
either program: where the versions' gradients of such a (call, leaf) differ, they are not
compared (``discarded_gradients`` in the evidence); nor, where BEFORE is no reference
(the self-consistency check below), a gradient AFTER discards unread. A GAN's
discriminator step that stops backpropagating into the generator
(``netD(fake.detach())``) changes only gradients the generator's ``zero_grad()`` throws
away before its own step.

A loss that leaks into another optimizer's leaves (each optimizer's ``zero_grad()`` run
right before its own loss's backward: the runner's ``owns``; a later call made for other
leaves adds to a leaf's gradient that already holds its own loss's, and its optimizer
steps on the sum: an actor loss training the critic) may be stopped by the fix: where
after gives that leaf nothing at that call, the difference is the leak's (the evidence's
``stopped_leaks``) and before's later trajectory is no reference.

Finite differences differentiate what autograd does: a grad-off read of a perturbed leaf
(a Q-learning target computed under ``torch.no_grad()`` with the network being trained)
sees its unperturbed value, except at a line the change wrote, inside an optimizer step
or inside an ``autograd.Function``'s forward (which its backward differentiates).

When both versions fail with the same error at the same, unchanged statement (another
bug, in this file or another), the calls both made are compared and the verdict is
``unverified: blocked by <error> at <file:line>``, never a rejection of the fix.

When BEFORE dies (a code error, not an environment problem) before some backward call
AFTER makes — e.g. ``w.normal_()`` on a leaf raises before any forward result exists —
BEFORE's forward function is unknown past that point. Those calls are then checked for
self-consistency: AFTER's gradients must be finite and equal the finite differences of
AFTER's *own* forward, which still rejects detached or otherwise cut gradients; the
evidence says so. If BEFORE completed, AFTER may not add backward calls.

The same self-consistency check takes over when BEFORE keeps running on a broken gradient
(its backward raised and the script caught it, gave ``None`` or nan, or missed a path
through a silent graph cut) and a later
forward result of AFTER then differs from BEFORE's: BEFORE's trajectory after a step with a
broken gradient is no reference. For the same reason module-level tensors that differ are
only noted, not rejected, once BEFORE's gradient was broken.

Finite differences are noisier than autograd, so they use a looser tolerance (rtol 1e-2,
atol 1e-3 plus the estimate's rounding-noise bound); elements whose estimate is undefined
(non-finite on both sides) are not compared, but AFTER's gradient must still be finite, and
if no needed element has a defined estimate the verdict is ``unverified``.

Trace format (what :mod:`.runner` writes; tensors are ``{"shape", "dtype", "numel",
"values", "truncated"}`` with row-major float values, nan/inf as strings)::

    {"outcome": {"status": "ok"} | {"status": "error", "type", "message", "line",
                                    "category": "env" | "code"},
     "leaves": [{"index", "shape", "dtype", "origin", "line"}, ...],
     "events": [{"index", "kind": "backward" | "grad", "line", "roots": [tensor],
                 "objective", "error": None | {"type", "message"},
                 "grads": {"<leaf index>": tensor | None},
                 "bound_values": {name: {"leaf": index | None, "value": tensor}},
                 "bound_grads": {name: tensor | None}, "discarded": [leaf index]}, ...],
     "event_count", "events_truncated", "globals": {name: tensor}, "leaf_globals": [name],
     "global_leaf_index": {name: leaf index},
     "parameter_names": {"<leaf index>": "model.lin.weight"},
     "seed", "held": [leaf index] (a replay), "held_steps"}
    or {"runner_error": {"kind": "timeout" | "crash" | ..., "message"}}

``grads`` of a ``backward`` event holds what the call added to each leaf's ``.grad``;
``bound_grads`` the gradient w.r.t. each module-level non-leaf that requires grad;
``frozen`` the leaves that do not require grad at the call; ``versions`` each leaf's
version counter at the call; ``padding_rows`` the elements
of each embedding weight's ``padding_idx`` row (zero gradient by definition: not compared
with finite differences).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gradfix.verify.intent import NO_INTENT, FixIntent
from gradfix.verify.oracle.common import (
    EPS_GUARD,
    FD_ATOL,
    FD_RTOL,
    MAKE_FASTER,
    MAKE_VERIFIABLE,
    NO_DERIVATIVE,
    OWN_FLOAT64,
    STRUCTURE_UNDECIDED,
    TOLERANCES,
    Verdict,
    _stepped,
    moved_while_frozen,
    newly_trained,
)
from gradfix.verify.oracle.comparison import _Comparison

__all__ = [
    "EPS_GUARD",
    "FD_ATOL",
    "FD_RTOL",
    "MAKE_FASTER",
    "MAKE_VERIFIABLE",
    "NO_DERIVATIVE",
    "OWN_FLOAT64",
    "STRUCTURE_UNDECIDED",
    "TOLERANCES",
    "Verdict",
    "compare_traces",
    "moved_while_frozen",
    "newly_trained",
    "plan_fd",
    "stepped_leaves",
]

#: the leaves changed in place between two recorded backward calls (None: no versions)
stepped_leaves = _stepped


def compare_traces(
    before: dict[str, Any],
    after: dict[str, Any],
    fd: dict[str, Any] | None = None,
    *,
    intent: FixIntent = NO_INTENT,
    estimable: bool = True,
    changed: Iterable[str] = (),
    rebound: Iterable[str] = (),
    forward_reference: dict[str, Any] | None = None,
    float64_reference: dict[str, Any] | None = None,
) -> Verdict:
    """Verdict for a BEFORE/AFTER pair of traces (see the module docstring).

    ``fd`` maps ``"before"``/``"after"`` to the runner's finite-difference answers;
    ``intent``: what the fix declares (its rules' ``fix_restores_gradient`` and the like, see
    :mod:`.intent`; :meth:`FixIntent.unknown` for a change made by hand);
    ``changed``: ``file:line`` of AFTER's lines the fix wrote (as the runner names a failing
    place): a failure elsewhere, after BEFORE failed at its own bug, is another bug's;
    ``rebound``: the names (``w``, ``self.w``) AFTER's changed statements bind;
    ``forward_reference``: BEFORE run with autograd off up to its first backward call,
    whose roots are recorded and the call skipped (where BEFORE raised before any backward
    call): AFTER's first call must compute the same forward results;
    ``float64_reference``: BEFORE run in float64 with the same random values, where its
    forward is not finite in float32 (a softmax that underflows before a ``log``): the
    value the program means there;
    ``estimable``: False where no finite differences can be run (a ``--cmd`` harness), so a
    gradient only they could judge leaves the fix unverified instead of rejected.
    """
    comparison = _Comparison(
        before, after, fd, intent=intent, estimable=estimable, changed=changed, rebound=rebound
    )
    comparison.forward_reference = forward_reference
    comparison.float64_reference = float64_reference
    return comparison.run()


def plan_fd(
    before: dict[str, Any],
    after: dict[str, Any],
    *,
    intent: FixIntent = NO_INTENT,
    changed: Iterable[str] = (),
    rebound: Iterable[str] = (),
    float64_reference: dict[str, Any] | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Finite-difference targets the comparison needs, by script (empty when none): missing
    or non-finite reference gradients, and the elements where AFTER's gradient differs from
    BEFORE's (a possible silent graph cut in BEFORE).

    Nothing is planned when the verdict is already decided without them (a rejection).
    """
    comparison = _Comparison(
        before, after, None, planning=True, intent=intent, changed=changed, rebound=rebound
    )
    comparison.float64_reference = float64_reference
    verdict = comparison.run()
    if verdict.status == "rejected":
        return {}
    return {source: targets for source, targets in comparison.needs.items() if targets}
