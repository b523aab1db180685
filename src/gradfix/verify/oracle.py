"""Decide from two execution traces whether a rewrite is proven (pure Python, no torch).

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
agrees with neither and the fix is rejected: a conservative answer.

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

import copy
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gradfix.torch_facts.curated import BACKWARD_TWICE, NO_GRAD_FN
from gradfix.verify.intent import NO_INTENT, FixIntent

FORWARD_RTOL, FORWARD_ATOL = 1e-5, 1e-6
#: how far an eps guard may move a forward result whose gradient was not finite
EPS_GUARD = 1e-3
GRAD_RTOL, GRAD_ATOL = 1e-4, 1e-5
FD_RTOL, FD_ATOL = 1e-2, 1e-3
#: finite-difference methods of elements where no derivative exists (left out, counted)
NO_DERIVATIVE = frozenset({"discontinuous", "unconverged"})
#: finite differences of the program run in float64 (``instrument.float64_run``), plus
#: their noise bound and truncation error: they judge a silent graph cut float32's
#: estimate cannot (before's and after's gradients both within its tolerance)
PRECISE_RTOL, PRECISE_ATOL = 1e-3, 1e-6
#: why a program has no float64 estimate when it computes in float64 itself (its float32
#: estimate was a float64 one already)
OWN_FLOAT64 = "the program uses float64 itself"
#: the relative rounding error of a gradient computed in float32
FLOAT32_GRADIENT = 1e-5
TOLERANCES = {
    "forward": {"rtol": FORWARD_RTOL, "atol": FORWARD_ATOL},
    "gradient": {"rtol": GRAD_RTOL, "atol": GRAD_ATOL},
    "finite_difference": {"rtol": FD_RTOL, "atol": FD_ATOL, "plus": "rounding-noise bound"},
    "float64_finite_difference": {
        "rtol": PRECISE_RTOL,
        "atol": PRECISE_ATOL,
        "plus": "rounding-noise bound and truncation error",
    },
}


#: What an unverified verdict suggests when the program could not run as it was driven.
MAKE_VERIFIABLE = (
    '; to verify it, drive the program yourself: --cmd "python train.py --epochs 1" '
    "or --entry MODULE:FUNCTION"
)
#: Why a change made by hand that restructures the run is left undecided.
STRUCTURE_UNDECIDED = (
    ": the backward calls and leaves do not line up one to one, and the change declares "
    "no intent to match them by"
)
#: The same after a timeout, when fewer steps may be enough.
MAKE_FASTER = (
    "; to verify it, stop it sooner (--max-steps 5) or drive it yourself: "
    '--cmd "python train.py --epochs 1" or --entry MODULE:FUNCTION'
)


def newly_trained(before: dict[str, Any], after: dict[str, Any]) -> list[int]:
    """Leaves that change in place between two backward calls of AFTER (an optimizer
    steps them) but never between two of BEFORE's: the leaves a fix that registers a
    parameter makes train. By each leaf's version counter at each recorded call."""

    if "runner_error" in before or "runner_error" in after:
        return []
    if before.get("event_count") != after.get("event_count"):
        return []
    leaves_b, leaves_a = before.get("leaves") or [], after.get("leaves") or []
    kept = list(range(len(leaves_a)))  # AFTER's leaf of each of BEFORE's
    if len(leaves_a) != len(leaves_b):
        # a fix that makes a plain tensor an ``nn.Parameter`` (GF109) adds leaves: BEFORE's
        # must still be there, in order, with AFTER's others the tensors it made leaves
        matched = _kept_leaves(leaves_a, leaves_b) if len(leaves_a) > len(leaves_b) else None
        if matched is None:
            return []
        kept = matched
    trained_b, trained_a = _stepped(before), _stepped(after)
    if trained_b is None or trained_a is None:
        return []
    return sorted(trained_a - {kept[k] for k in trained_b})


def _stepped(trace: dict[str, Any]) -> set[int] | None:
    """The leaves changed in place between two recorded backward calls (None: the trace
    has no version counters)."""
    events = trace.get("events") or []
    if any("versions" not in event for event in events):
        return None
    changed: set[int] = set()
    for earlier, later in zip(events, events[1:]):
        old, new = earlier["versions"], later["versions"]
        changed.update(k for k in range(min(len(old), len(new))) if old[k] != new[k])
    return changed


def _kept_leaves(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> list[int] | None:
    """The leaves of BEFORE that AFTER still creates, in order (AFTER's leaves matched to a
    subsequence of BEFORE's by line, shape and dtype), or None when they do not match."""
    kept: list[int] = []
    for k, leaf in enumerate(before):
        if len(kept) < len(after) and _leaf_key(leaf) == _leaf_key(after[len(kept)]):
            kept.append(k)
    return kept if len(kept) == len(after) else None


def _leaf_key(leaf: dict[str, Any]) -> tuple[Any, ...]:
    return (leaf.get("line"), tuple(leaf.get("shape") or ()), leaf.get("dtype"))


def _with_leaves(trace: dict[str, Any], kept: list[int]) -> dict[str, Any]:
    """``trace`` with only the leaves ``kept`` (old indices), renumbered in order."""
    new = {old: k for k, old in enumerate(kept)}

    def by_key(mapping: dict[str, Any] | None) -> dict[str, Any]:
        return {str(new[int(k)]): v for k, v in (mapping or {}).items() if int(k) in new}

    events = []
    for event in trace.get("events", []):
        event = dict(event, grads=by_key(event.get("grads")))
        if "frozen" in event:
            event["frozen"] = [new[k] for k in event["frozen"] or [] if k in new]
        if "padding_rows" in event:
            event["padding_rows"] = by_key(event["padding_rows"])
        if "bound_values" in event:
            event["bound_values"] = {
                name: dict(entry, leaf=new.get(entry.get("leaf")))
                for name, entry in (event["bound_values"] or {}).items()
            }
        events.append(event)
    leaves = trace.get("leaves", [])
    return dict(
        trace,
        leaves=[dict(leaves[old], index=k) for k, old in enumerate(kept)],
        events=events,
        global_leaf_index={
            name: new[k] for name, k in (trace.get("global_leaf_index") or {}).items() if k in new
        },
        parameter_names=by_key(trace.get("parameter_names")),
    )


@dataclass
class Verdict:
    """Outcome of one verification: ``status`` is verified, rejected or unverified."""

    status: str
    reason: str
    evidence: dict[str, Any] = field(default_factory=dict)

    @property
    def verified(self) -> bool:
        return self.status == "verified"

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "reason": self.reason,
            "evidence": copy.deepcopy(self.evidence),
        }


class _Rejected(Exception):
    pass


class _Unverifiable(Exception):
    pass


@dataclass
class _Stats:
    max_abs_diff: float = 0.0
    max_rel_diff: float = 0.0
    count: int = 0

    def add(self, actual: float, expected: float) -> None:
        diff = abs(actual - expected)
        self.max_abs_diff = max(self.max_abs_diff, diff)
        if diff:
            self.max_rel_diff = max(self.max_rel_diff, diff / max(abs(expected), 1e-12))
        self.count += 1

    def as_dict(self) -> dict[str, Any]:
        return {
            "max_abs_diff": self.max_abs_diff,
            "max_rel_diff": self.max_rel_diff,
            "values_compared": self.count,
        }


def compare_traces(
    before: dict[str, Any],
    after: dict[str, Any],
    fd: dict[str, Any] | None = None,
    *,
    intent: FixIntent = NO_INTENT,
    estimable: bool = True,
    changed: Iterable[str] = (),
    forward_reference: dict[str, Any] | None = None,
) -> Verdict:
    """Verdict for a BEFORE/AFTER pair of traces (see the module docstring).

    ``fd`` maps ``"before"``/``"after"`` to the runner's finite-difference answers;
    ``intent``: what the fix declares (its rules' ``fix_restores_gradient`` and the like, see
    :mod:`.intent`; :meth:`FixIntent.unknown` for a change made by hand);
    ``changed``: ``file:line`` of AFTER's lines the fix wrote (as the runner names a failing
    place): a failure elsewhere, after BEFORE failed at its own bug, is another bug's;
    ``forward_reference``: BEFORE run with autograd off up to its first backward call,
    whose roots are recorded and the call skipped (where BEFORE raised before any backward
    call): AFTER's first call must compute the same forward results;
    ``estimable``: False where no finite differences can be run (a ``--cmd`` harness), so a
    gradient only they could judge leaves the fix unverified instead of rejected.
    """
    comparison = _Comparison(before, after, fd, intent=intent, estimable=estimable, changed=changed)
    comparison.forward_reference = forward_reference
    return comparison.run()


def plan_fd(
    before: dict[str, Any],
    after: dict[str, Any],
    *,
    intent: FixIntent = NO_INTENT,
    changed: Iterable[str] = (),
) -> dict[str, list[dict[str, Any]]]:
    """Finite-difference targets the comparison needs, by script (empty when none): missing
    or non-finite reference gradients, and the elements where AFTER's gradient differs from
    BEFORE's (a possible silent graph cut in BEFORE).

    Nothing is planned when the verdict is already decided without them (a rejection).
    """
    comparison = _Comparison(before, after, None, planning=True, intent=intent, changed=changed)
    verdict = comparison.run()
    if verdict.status == "rejected":
        return {}
    return {source: targets for source, targets in comparison.needs.items() if targets}


def _reran_freed_graph(event: dict[str, Any], earlier: Iterable[dict[str, Any]] = ()) -> bool:
    """The call raised "backward through the graph a second time" and its root is a value
    an earlier call already backpropagated (made once, before a loop), not a new result.
    A new result whose graph reaches into a freed one (a hidden state carried across
    steps) is a forward that ran: it stays a reference."""
    error = event.get("error") or {}
    if BACKWARD_TWICE not in str(error.get("message", "")):
        return False
    roots = [_values(root) for root in event.get("roots", [])]
    return any(roots == [_values(r) for r in e.get("roots", [])] for e in earlier)


def _discarded(event: dict[str, Any], k: int) -> bool:
    """Leaf ``k``'s ``.grad`` was reset after this call before the program read it."""
    return k in (event.get("discarded") or ())


def _same_gradient(grad_b: dict[str, Any] | None, grad_a: dict[str, Any] | None) -> bool:
    if grad_b is None or grad_a is None:
        return grad_b is grad_a
    expected, actual = _values(grad_b), _values(grad_a)
    return len(expected) == len(actual) and all(
        abs(a - e) <= GRAD_ATOL + GRAD_RTOL * abs(e) for e, a in zip(expected, actual)
    )


def _values(tensor: dict[str, Any]) -> list[float]:
    return [float(v) for v in tensor.get("values", [])]


def _same_values(tb: dict[str, Any], ta: dict[str, Any]) -> bool:
    """Two encoded tensors hold the same values (forward tolerance; any shape)."""
    if tb.get("numel") != ta.get("numel") or tb.get("truncated") or ta.get("truncated"):
        return False
    return all(
        abs(a - b) <= FORWARD_ATOL + FORWARD_RTOL * abs(b) for b, a in zip(_values(tb), _values(ta))
    )


def _non_finite_gradient(event: dict[str, Any]) -> bool:
    """The backward call raised, or gave some leaf a nan/inf gradient."""
    if event.get("error"):
        return True
    return any(
        grad is not None and not all(math.isfinite(v) for v in _values(grad))
        for grad in (event.get("grads") or {}).values()
    )


def _no_path_to_any_leaf(event: dict[str, Any]) -> bool:
    """The backward call raised because its objective has no graph to any leaf."""
    error = event.get("error") or {}
    return NO_GRAD_FN in str(error.get("message"))


def _first_clause(message: str) -> str:
    return message.split(" and ")[0].split(". ")[0]


def _float64_estimates(entry: dict[str, Any]) -> dict[int, tuple[float, float, float]]:
    """Element -> (float64 estimate, noise bound, truncation error) of an FD entry."""
    return {int(p[0]): (float(p[1]), float(p[2]), float(p[3])) for p in entry.get("precise") or []}


def _file_of(where: Any) -> str:
    return str(where).rsplit(":", 1)[0]


def _at_line(line: int | None) -> str:
    return f" at line {line}" if line else ""


def _outcome_text(outcome: dict[str, Any]) -> str:
    return f"{outcome.get('type')}{_at_line(outcome.get('line'))}: {outcome.get('message')}"


def _short_outcome(outcome: dict[str, Any]) -> str:
    return f"{outcome.get('type')}{_at_line(outcome.get('line'))}"


def _format(x: float) -> str:
    return f"{x:.6g}"


def _fd_bounds(
    estimate: float, noise: float, interval: tuple[float, float] | list[float] | None
) -> tuple[float, float]:
    """The range of gradients a finite-difference estimate accepts: the estimate, or the
    slopes on either side of a kink, widened by the FD tolerance and the noise bound."""
    low, high = (estimate, estimate) if interval is None else (interval[0], interval[1])
    return (
        low - (FD_ATOL + noise + FD_RTOL * abs(low)),
        high + (FD_ATOL + noise + FD_RTOL * abs(high)),
    )


def _estimate_text(estimate: float, interval: tuple[float, float] | list[float] | None) -> str:
    if interval is None:
        return _format(estimate)
    return f"a kink with slopes {_format(interval[0])} and {_format(interval[1])}"


def _estimates(entry: dict[str, Any]) -> dict[int, tuple[float, str, float, Any]]:
    """Element -> (estimate, method, noise, kink interval or None) of one FD entry."""
    if entry.get("unused"):  # the leaf does not reach the call: exactly zero
        return {j: (0.0, "unused", 0.0, None) for j in range(int(entry.get("numel", 0)))}
    intervals = entry.get("intervals") or [None] * len(entry["indices"])
    found = {}
    for j, value, method, noise, interval in zip(
        entry["indices"], entry["values"], entry["methods"], entry["noise"], intervals
    ):
        kink = method == "kink" and interval is not None
        found[int(j)] = (
            float(value),
            method,
            float(noise),
            (float(interval[0]), float(interval[1])) if kink else None,
        )
    return found


@dataclass
class _GradientChange:
    """AFTER's autograd gradient of one leaf differs from BEFORE's at some elements."""

    label: str
    leaf: str
    before: list[float]
    after: list[float]

    def message(self, j: int) -> str:
        return (
            f"gradient changed: {self.label} gives {self.leaf} the gradient "
            f"{_format(self.after[j])} at element {j}, before's autograd gives "
            f"{_format(self.before[j])} (rtol {GRAD_RTOL}, atol {GRAD_ATOL})"
        )


class _Comparison:
    def __init__(
        self,
        before: dict[str, Any],
        after: dict[str, Any],
        fd: dict[str, Any] | None,
        planning: bool = False,
        intent: FixIntent = NO_INTENT,
        estimable: bool = True,
        changed: Iterable[str] = (),
    ) -> None:
        self.before = before
        #: ``file:line`` of after's lines the fix wrote (a failure there is the fix's)
        self.changed = set(changed)
        self.estimable = estimable
        self.after = after
        self.fd = fd
        self.intent = intent
        self.rules = sorted(set(intent.codes))
        # the weights torch made are checked for a lost gradient only for these fixes
        self.check_torch_made = intent.restores_gradient
        # a fix meant to change the training (see ``FixIntent.changes_training``)
        self.changes_training = intent.changes_training
        self.stale_at: int | None = None  # first call where before adds to a stale gradient
        self.cleared: set[int] = set()  # the leaves whose stale gradient the fix clears

        #: BEFORE's leaf index (as its runs number them) of each leaf compared, when the
        #: fix left some out (``fix_drops_leaves``); None: the same leaves
        self.before_leaves: list[int] | None = None
        self.planning = planning  # collecting FD targets: a changed gradient is one
        self.needs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
        self.forward = _Stats()
        self.gradient = _Stats()
        self.finite = _Stats()
        self.fd_details: dict[str, Any] = {
            "one_sided": [],
            "kinks": [],
            "left_out": [],
            "undefined": 0,
            "uncompared": 0,
            "capped": False,
        }
        self.kink_checks = 0
        self.notes: list[str] = []
        self.leaves_compared: set[int] = set()  # a comparison of the leaf started
        self.values_checked: set[int] = set()  # leaves with at least one value compared
        self.undefined_at: dict[int, int] = {}  # leaf -> elements whose estimate is undefined
        self.events_compared = 0
        self.self_checked_events = 0
        self.globals_compared: list[str] = []
        self.no_gradient_either: set[int] = set()  # checked by finite differences
        self.not_compared: dict[int, str] = {}  # leaf -> why its gradient was not compared
        self.blocked: dict[str, Any] | None = None  # both versions fail the same way
        self._drop_uncreated_leaves()
        #: the leaves AFTER was replayed with held, named while AFTER's numbering stands
        self.held_text = self._leaf_list(self._held()) if self._held() else ""
        self._drop_added_leaves()
        self.broken_at: int | None = None  # first event where before's gradient is broken
        self.diverged_at: int | None = None  # first event whose forward parts from before's
        self._determinism_checked: set[tuple[str, int]] = set()
        self.fd_consulted = False
        self.silent_cuts: list[dict[str, Any]] = []  # elements where before's autograd is wrong
        # (call, leaf) whose gradients differ but are reset unread in both versions
        self.discarded_gradients: list[dict[str, int]] = []
        #: backward calls whose forward an eps guard moved (see ``_eps_guard``)
        self.eps_guarded: list[dict[str, Any]] = []
        #: finite-difference targets whose float32 disagreement float64 must confirm
        self.confirm: list[dict[str, Any]] = []
        #: this comparison already has the float64 answers it asked for
        self.confirmed = any(result.get("confirmed") for result in (fd or {}).values())
        #: see ``compare_traces``
        self.forward_reference: dict[str, Any] | None = None

    # ------------------------------------------------------------- driver
    def run(self) -> Verdict:
        try:
            self._check_runs()
            self._check_counts()
            self._check_forward_reference()
            self._check_stale_roots()
            for i in range(len(self.after.get("events", []))):
                self._compare_event(i)
            if self.stale_at is not None:
                self._check_fix_clears()
            self._compare_globals()
            if self.blocked is not None:
                raise _Unverifiable(self._blocked_reason(self.blocked))
        except _Rejected as exc:
            return Verdict("rejected", self._held_prefix() + str(exc), self.evidence())
        except _Unverifiable as exc:
            return Verdict("unverified", self._held_prefix() + str(exc), self.evidence())
        verdict = self._conclude()
        if self.held_text and verdict.verified:
            verdict.reason = (
                f"leaves now trained: {self.held_text}; with them held at "
                f"their values across the optimizer's {self.after.get('held_steps', 0)} "
                f"step(s), {verdict.reason}"
            )
        return verdict

    def _drop_added_leaves(self) -> None:
        """A fix that makes plain tensors leaves (``nn.Parameter(torch.randn(...))``, a
        ``fix_changes_training`` rule) and was replayed with them held: BEFORE has no
        gradient of them to compare; their values stay BEFORE's through the replay, so
        every other forward result and gradient must still be BEFORE's."""
        leaves_b, leaves_a = self.before.get("leaves", []), self.after.get("leaves", [])
        if len(leaves_a) <= len(leaves_b) or not self.intent.changes_training:
            return
        kept = _kept_leaves(leaves_a, leaves_b)
        if kept is None:
            return  # rejected by the counts
        held = set(self._held())
        added = [k for k in range(len(leaves_a)) if k not in kept]
        if any(self._stepped_in_after(k) and k not in held for k in added):
            return  # trained in the replay: not the values BEFORE computed with
        lines = ", ".join(self._short_leaf(k) for k in added)
        new = {old: k for k, old in enumerate(kept)}
        self.after = _with_leaves(self.after, kept)
        self.after["held"] = [new[k] for k in sorted(held) if k in new]
        self.notes.append(
            f"the fix makes leaves of tensors before keeps plain ({lines}): held at their "
            "values in the replay; before has no gradient of them to compare"
        )

    def _stepped_in_after(self, k: int) -> bool:
        stepped = _stepped(self.after)
        return stepped is None or k in stepped

    def _held(self) -> list[int]:
        """The leaves AFTER was replayed with held across optimizer steps (the leaves the
        fix makes train, see :func:`newly_trained`)."""
        return [int(k) for k in self.after.get("held") or ()]

    def _held_prefix(self) -> str:
        if not self.held_text:
            return ""
        return f"with the leaves it makes train ({self.held_text}) held: "

    def _conclude(self) -> Verdict:
        missing = sum(len(t) for t in self.needs.values())
        if missing:
            return Verdict(
                "unverified",
                "a finite-difference reference is needed for "
                f"{missing} (backward call, leaf) pair(s) but was not computed",
                self.evidence(),
            )
        undefined = self.fd_details["undefined"]
        if undefined and not (self.finite.count or self.gradient.count or self.kink_checks):
            return Verdict(
                "unverified",
                f"the finite-difference reference is undefined (not "
                f"finite) at all {undefined} gradient element(s) that need it",
                self.evidence(),
            )
        if self.events_compared == 0 and self.self_checked_events == 0:
            return self._conclude_without_gradients()
        parts = []
        if self.events_compared:
            parts.append(
                f"forward results and gradients match over {self.events_compared} "
                f"backward call(s) and {len(self._compared())} leaf tensor(s)"
            )
        parts += self._leaf_summary()
        if self.silent_cuts:
            parts.append(
                "before's autograd gradient differs from finite differences of its "
                f"forward (a silent graph cut) at {len(self.silent_cuts)} element(s): "
                "compared against finite differences"
            )
        if self.discarded_gradients:
            parts.append(self._discarded_summary())
        if self.self_checked_events and self.diverged_at is not None and self.stale_at is not None:
            parts.append(
                f"before adds each gradient to stale ones from backward call #{self.stale_at + 1}"
                f" on (never cleared) and its trajectory parts from the fix's at "
                f"#{self.diverged_at + 1}: {self.self_checked_events} call(s) compared "
                "against the fix's own finite differences"
            )
        elif self.self_checked_events and self.diverged_at is not None:
            parts.append(
                f"before's gradient is broken at backward call #{self._broken_call()}"
                f" and its trajectory parts from the fix's at #{self.diverged_at + 1}:"
                f" {self.self_checked_events} call(s) compared against the fix's own "
                "finite differences"
            )
        elif self.self_checked_events:
            count = self.before.get("event_count", 0)
            where = "any forward result" if count == 0 else f"backward call #{count + 1}"
            parts.append(
                f"before raised {_short_outcome(self.before['outcome'])} before "
                f"{where}: compared against the fix's own finite differences over "
                f"{self.self_checked_events} backward call(s)"
            )
        if self.finite.count:
            parts.append(
                f"{self.finite.count} gradient element(s) checked against finite differences"
            )
        if self.fd_details.get("float64"):
            parts.append(
                f"{self.fd_details['float64']} of them by finite differences of before run "
                "in float64, which tell before's gradient from after's where float32's "
                "cannot"
            )
        if self.kink_checks:
            parts.append(
                f"{self.kink_checks} element(s) at a kink of the forward function "
                "accepted between its one-sided slopes"
            )
        if self.eps_guarded:
            moved = max(entry["moved"] for entry in self.eps_guarded)
            parts.append(
                f"the forward moved by at most {_format(moved)} at {len(self.eps_guarded)} "
                "call(s) whose gradient before was not finite (an eps guard)"
            )
        if self.fd_details["left_out"]:
            parts.append(
                f"{len(self.fd_details['left_out'])} element(s) left out where the forward "
                "has no derivative (finite differences do not converge: a discontinuity)"
            )
        if self.fd_details.get("capped"):
            parts.append("finite differences were capped (see evidence)")
        return Verdict("verified", "; ".join(parts), self.evidence())

    def _discarded_summary(self) -> str:
        calls = sorted({entry["event"] + 1 for entry in self.discarded_gradients})
        leaves = sorted({entry["leaf"] for entry in self.discarded_gradients})
        shown = ", ".join(f"#{c}" for c in calls[:4]) + (
            f" and {len(calls) - 4} more" if len(calls) > 4 else ""
        )
        return (
            "not compared: gradients discarded unread (`.grad` reset before anything read "
            f"it) that backward call(s) {shown} give {self._leaf_list(leaves)}"
        )

    def _blocked_reason(self, outcome: dict[str, Any]) -> str:
        ran = (
            f"; the {self.events_compared} backward call(s) made before it match"
            if self.events_compared
            else ""
        )
        where = outcome.get("where")
        return (
            f"blocked by {outcome.get('type')}: {outcome.get('message')}"
            f"{f' at {where}' if where else ''}, where both versions fail the same way{ran}"
        )

    def _compared(self) -> list[int]:
        """The leaves at least one of whose gradient values was compared."""
        return sorted(self.leaves_compared & self.values_checked)

    def _leaf_summary(self) -> list[str]:
        """Which leaves were compared and which were not, and why (one clause each)."""
        compared = self._compared()
        parts = []
        if compared:
            parts.append("leaves compared: " + self._leaf_list(compared))
        if self.no_gradient_either:
            parts.append(
                "without gradient in both versions and independent of them by finite "
                "differences of the fix's forward: "
                + self._leaf_list(sorted(self.no_gradient_either))
            )
        parts += [
            f"not compared: {self._short_leaf(k)} ({why})" for k, why in self._uncompared().items()
        ]
        if self.after["outcome"].get("status") == "stopped":
            steps = self.after["outcome"].get("max_steps")
            parts.append(f"both versions stopped after {steps} backward call(s) (--max-steps)")
        return parts

    def _leaf_list(self, leaves: list[int], shown: int = 4) -> str:
        """``#0 (line 3), #1 (line 4)``; past ``shown`` leaves, how many more (the
        evidence lists them all)."""
        text = ", ".join(self._short_leaf(k) for k in leaves[:shown])
        return text + (f" and {len(leaves) - shown} more" if len(leaves) > shown else "")

    def _short_leaf(self, k: int) -> str:
        leaves = self.after.get("leaves", [])
        line = leaves[k].get("line") if k < len(leaves) else None
        name = self._parameter_name(k, self.after)
        return f"#{k}{name}" + (f" (line {line})" if line else "")

    def _uncompared(self) -> dict[int, str]:
        """Leaves of AFTER whose gradient no comparison covered, with the reason."""
        found = dict(self.not_compared)
        for k in sorted(self.leaves_compared - self.values_checked):
            undefined = self.undefined_at.get(k)
            found[k] = (
                "the finite-difference reference is undefined (not finite) at each of its "
                f"{undefined} element(s) estimated"
                if undefined
                else "none of its elements was estimated (finite differences capped)"
            )
        seen = self.leaves_compared | self.no_gradient_either
        discarded = {entry["leaf"] for entry in self.discarded_gradients}
        for k in range(len(self.after.get("leaves", []))):
            if k not in seen and k not in found:
                found[k] = (
                    "its gradients differ only where both versions discard them unread"
                    if k in discarded
                    else "reaches no recorded backward call"
                )
        return dict(sorted(found.items()))

    def _conclude_without_gradients(self) -> Verdict:
        outcome = self.before["outcome"]
        if outcome.get("category") == "env":
            return Verdict(
                "unverified",
                f"could not run: {_outcome_text(outcome)}{MAKE_VERIFIABLE}",
                self.evidence(),
            )
        if outcome.get("status") != "ok":
            return Verdict(
                "unverified",
                f"before raised {_outcome_text(outcome)} and "
                "neither version calls backward: nothing to compare",
                self.evidence(),
            )
        if not self.globals_compared:
            return Verdict(
                "unverified",
                "nothing to compare: neither version calls backward "
                f"and they share no module-level tensors{MAKE_VERIFIABLE}",
                self.evidence(),
            )
        return Verdict(
            "verified",
            f"forward values equal ({len(self.globals_compared)} "
            "module-level tensor(s)); no gradients were exercised",
            self.evidence(),
        )

    def evidence(self) -> dict[str, Any]:
        fd_used = self.fd_consulted
        grads = _Stats(
            max(self.gradient.max_abs_diff, self.finite.max_abs_diff),
            max(self.gradient.max_rel_diff, self.finite.max_rel_diff),
            self.gradient.count + self.finite.count,
        )
        return {
            "seed": self.before.get("seed"),
            "backward_events": {
                "before": self.before.get("event_count", 0),
                "after": self.after.get("event_count", 0),
            },
            "events_compared": self.events_compared,
            "events_self_checked": self.self_checked_events,
            "leaves_compared": self._compared(),
            "leaves_without_gradient": sorted(self.no_gradient_either),
            "leaves_not_compared": {str(k): why for k, why in self._uncompared().items()},
            "parameter_names": dict(self.after.get("parameter_names") or {}),
            "rules": list(self.rules),
            "now_trained": self._held(),
            "torch_made_weights_checked": self.check_torch_made,
            "fd_used": fd_used,
            "max_abs_diff": grads.max_abs_diff,
            "max_rel_diff": grads.max_rel_diff,
            "tolerances": copy.deepcopy(TOLERANCES),
            "forward": self.forward.as_dict(),
            "gradient": self.gradient.as_dict(),
            "finite_difference": dict(
                self.finite.as_dict(),
                **self.fd_details,
                evaluations=sum(r.get("evaluations", 0) for r in (self.fd or {}).values()),
            ),
            "silent_graph_cuts": copy.deepcopy(self.silent_cuts),
            "discarded_gradients": copy.deepcopy(self.discarded_gradients),
            "globals_compared": list(self.globals_compared),
            "before_outcome": self.before.get("outcome"),
            "after_outcome": self.after.get("outcome"),
            "eps_guarded": list(self.eps_guarded),
            **({"confirm": list(self.confirm)} if self.confirm else {}),
            "notes": list(self.notes),
        }

    def _drop_uncreated_leaves(self) -> None:
        leaves_b, leaves_a = self.before.get("leaves", []), self.after.get("leaves", [])
        if len(leaves_a) >= len(leaves_b) or not self.intent.drops_leaves:
            return
        kept = _kept_leaves(leaves_b, leaves_a)
        if kept is None:
            return  # rejected by the counts
        dropped = [leaves_b[k].get("line") for k in range(len(leaves_b)) if k not in kept]
        self.before = _with_leaves(self.before, kept)
        self.before_leaves = kept
        lines = ", ".join(f"line {line}" for line in dropped)
        self.notes.append(f"the fix creates without requires_grad the leaves made at {lines}")

    # ------------------------------------------------------ whole-run checks
    def _check_runs(self) -> None:
        for label, trace in (("before", self.before), ("after", self.after)):
            failure = trace.get("runner_error")
            if failure:
                hint = MAKE_FASTER if failure.get("kind") == "timeout" else ""
                raise _Unverifiable(
                    f"{label} could not be executed: {failure.get('message')}{hint}"
                )
        ob, oa = self.before["outcome"], self.after["outcome"]
        for label, outcome in (("before", ob), ("after", oa)):
            if outcome.get("category") == "timeout":  # a --cmd run past its time limit
                raise _Unverifiable(
                    f"{label} could not be executed: {outcome.get('message')}{MAKE_FASTER}"
                )
        same = (ob.get("type"), ob.get("message")) == (oa.get("type"), oa.get("message"))
        if ob.get("category") == "env" and not (oa.get("category") == "env" and same):
            raise _Unverifiable(f"before could not run: {_outcome_text(ob)}{MAKE_VERIFIABLE}")
        if oa.get("category") == "env":
            if not same:
                raise _Unverifiable(f"after could not run: {_outcome_text(oa)}")
            self.notes.append(f"both versions stop at {_outcome_text(oa)}")
            return
        if oa.get("status") == "error" and self._same_failure(ob, oa):
            if self._repairs(oa):
                raise _Rejected(
                    f"after still raises the error the fix is meant to repair: {_outcome_text(oa)}"
                )
            self.blocked = oa  # judged once the calls both versions made are compared
        elif oa.get("status") == "error" and self._failed_further_on(ob, oa):
            # before stopped at its bug; the fix got past it and the run stops at another
            # statement, which the fix did not write: another bug blocks the proof
            self.blocked = oa
        elif oa.get("status") == "error":
            raise _Rejected(f"after raised {_outcome_text(oa)}")

    @staticmethod
    def _same_failure(ob: dict[str, Any], oa: dict[str, Any]) -> bool:
        """Both versions fail with the same error at the same statement, which the fix
        left as it was (another bug in the program, not the fix's). The statement is
        matched by its file and text, so a fix that inserts or removes lines above it
        does not make it another one."""
        keys = ("status", "type", "message", "code")
        located = oa.get("where") is not None or oa.get("type") == "CommandFailed"
        if not located or not all(ob.get(k) == oa.get(k) for k in keys):
            return False
        if oa.get("type") == "CommandFailed" or ob.get("where") == oa.get("where"):
            return True
        return _file_of(ob.get("where")) == _file_of(oa.get("where")) and bool(oa.get("code"))

    def _blocked_in_backward(self, error: dict[str, Any]) -> bool:
        """A backward call fails in after as the run of both versions does, with an error
        that the fix's rules do not repair (a rule's fix declares the errors it repairs,
        none for a fix that is not about an error: GF107, GF407): another bug's. A change
        of no known rule (a test's, or ``--baseline``) owns every error of its backward
        calls: it still raises."""
        if self.blocked is None or self.blocked.get("message") != error.get("message"):
            return False
        return bool(self.intent.codes) and not self._repairs(error)

    def _repairs(self, outcome: dict[str, Any]) -> bool:
        message = str(outcome.get("message", "")).lower()
        return any(needle.lower() in message for needle in self.intent.repairs)

    def _failed_further_on(self, ob: dict[str, Any], oa: dict[str, Any]) -> bool:
        """Before failed with a code error at one statement, after at another one that the
        fix did not change (its ``changed`` lines): the fix got past before's failure and
        another bug stops the run."""
        if ob.get("status") != "error" or ob.get("category") != "code":
            return False
        if oa.get("category") != "code" or not oa.get("where") or not ob.get("where"):
            return False
        if ob.get("where") == oa.get("where") or ob.get("code") == oa.get("code"):
            return False  # the same statement (rewritten, or moved by the fix): the fix's
        return oa.get("where") not in self.changed

    def _check_counts(self) -> None:
        nb, na = self.before.get("event_count", 0), self.after.get("event_count", 0)
        before_died = self.before["outcome"].get("status") == "error"
        # A different structure is evidence against a fix that declares none (a rule's);
        # a change made by hand may restructure (one backward of a sum for two, no more
        # throw-away leaves each step): matching that is not built yet, so it is undecided.
        differs = _Rejected if self.intent.declared else _Unverifiable
        suffix = "" if self.intent.declared else STRUCTURE_UNDECIDED
        if na < nb:
            raise differs(f"after makes {na} backward call(s), before makes {nb}{suffix}")
        if na > nb and not before_died:
            raise differs(f"after makes {na} backward call(s), before only {nb}{suffix}")
        lb, la = len(self.before.get("leaves", [])), len(self.after.get("leaves", []))
        if la > lb and not before_died:
            # leaves after makes that before does not, and that are no parameters it now
            # trains (held and dropped above): fresh tensors asking for grad, cut off from
            # the model (`torch.tensor(loss.item(), requires_grad=True)`), whatever the intent
            raise _Rejected(f"after creates {la} leaf tensor(s) that require grad, before {lb}")
        if la < lb:
            raise differs(
                f"after creates {la} leaf tensor(s) that require grad, before {lb}{suffix}"
            )
        for k in range(min(lb, la)):
            self._check_leaf(k)
        if self.after.get("events_truncated"):
            self.notes.append(
                f"only the first {len(self.after['events'])} backward calls "
                "were recorded and compared"
            )

    def _check_leaf(self, k: int) -> None:
        leaf_b, leaf_a = self.before["leaves"][k], self.after["leaves"][k]
        shape_b, shape_a = leaf_b.get("shape"), leaf_a.get("shape")
        if math.prod(shape_b) != math.prod(shape_a):
            raise _Rejected(
                f"leaf {k} has shape {tuple(shape_b)} in before "
                f"(line {leaf_b.get('line')}) but {tuple(shape_a)} in after"
            )
        if shape_b != shape_a:
            self.notes.append(
                f"leaf {k} reshaped {tuple(shape_b)} -> {tuple(shape_a)}; "
                "gradients compared element by element"
            )
        if leaf_b.get("dtype") != leaf_a.get("dtype"):
            self.notes.append(f"leaf {k} dtype {leaf_b.get('dtype')} -> {leaf_a.get('dtype')}")

    # ---------------------------------------------------------------- events
    def _compare_event(self, i: int) -> None:
        ea = self.after["events"][i]
        label = f"backward call #{i + 1}{_at_line(ea.get('line'))}"
        if ea.get("error"):
            if self._blocked_in_backward(ea["error"]):
                raise _Unverifiable(self._blocked_reason(self.blocked or {}))
            raise _Rejected(
                f"after: {label} raised {ea['error']['type']}: {ea['error']['message']}"
            )
        if i >= self.before.get("event_count", 0):
            if self.self_checked_events == 0:
                self.notes.append(
                    f"before raised {_short_outcome(self.before['outcome'])} "
                    f"before {label}: from there on the fix is compared against "
                    "its own finite differences; its forward results cannot be "
                    "checked"
                )
            self._self_check_event(i, ea)
            return
        if self.diverged_at is not None:
            self._self_check_event(i, ea)
            return
        before_events = self.before.get("events", [])
        if i >= len(before_events):
            return  # beyond the recorded window (noted in _check_counts)
        eb = before_events[i]
        mismatch = self._roots_mismatch(eb, ea, label)
        if mismatch is not None and self._eps_guard(eb, ea, label):
            mismatch = None
        if mismatch is not None and _no_path_to_any_leaf(eb):
            self._judge_new_objective(i, eb, ea, label, mismatch)
            return
        if mismatch is None:
            self._compare_event_grads(i, eb, ea, label)
            self._check_stale_gradient(i, eb, ea, label)
            self.events_compared += 1
            return
        if _reran_freed_graph(eb, self.before.get("events", [])[:i]):
            self._mark_broken(i)  # before's forward did not run again: its result is stale
        if self.broken_at is None:
            raise _Rejected(mismatch)
        # Before stepped with a broken gradient (error/None/nan) at `broken_at`: its later
        # trajectory is not what the fixed code should reproduce.
        self.diverged_at = i
        self.notes.append(
            f"{mismatch}; before's gradient was broken at backward call "
            f"#{self._broken_call()}, so its later trajectory is no reference: "
            "from here on the fix is compared against its own finite "
            "differences"
        )
        self._self_check_event(i, ea)

    def _roots_mismatch(self, eb: dict[str, Any], ea: dict[str, Any], label: str) -> str | None:
        roots_b, roots_a = eb.get("roots", []), ea.get("roots", [])
        if len(roots_b) != len(roots_a):
            return (
                f"forward changed: {label} differentiates {len(roots_a)} tensor(s), "
                f"before {len(roots_b)}"
            )
        for rb, ra in zip(roots_b, roots_a):
            if rb.get("shape") != ra.get("shape") or rb.get("dtype") != ra.get("dtype"):
                return (
                    f"forward changed: the result of {label} is {ra.get('dtype')}"
                    f"{tuple(ra.get('shape', []))}, before {rb.get('dtype')}"
                    f"{tuple(rb.get('shape', []))}"
                )
            mismatch = self._forward_mismatch(
                _values(rb),
                _values(ra),
                f"the result of {label}",
                nan_matters=self.broken_at is not None,
            )
            if mismatch:
                return mismatch
        return None

    def _judge_new_objective(
        self, i: int, eb: dict[str, Any], ea: dict[str, Any], label: str, mismatch: str
    ) -> None:
        """Before's objective at call ``i`` reaches no leaf and after's forward differs.
        Where finite differences show before's forward depends on the leaves (a graph
        cut by ``torch.tensor``, ``.item()``: the values flow, the graph does not), the fix
        had to keep it: rejected. Where it is flat in them (an ``argmax``, a count: no
        derivative to keep), a fix that gives the objective a gradient must change it:
        there is no reference, unverified."""
        leaves = sorted(int(k) for k in (ea.get("grads") or {}))
        entries = [self._fd_entry("before", i, k, None) for k in leaves]
        if self.planning or not leaves:
            if not leaves:
                raise _Rejected(mismatch)
            return
        if any(entry is None for entry in entries):
            raise _Rejected(f"{mismatch}; finite differences of before's forward were not computed")
        values = [
            float(value)
            for entry in entries
            if entry is not None and not entry.get("unused")
            for value, method in zip(entry["values"], entry["methods"])
            if method not in NO_DERIVATIVE and math.isfinite(float(value))
        ]
        unused = all(entry is not None and entry.get("unused") for entry in entries)
        if unused or (values and all(abs(v) <= FD_ATOL for v in values)):
            raise _Unverifiable(
                f"{mismatch}; before's {label} raised {eb['error']['type']}: "
                f"{_first_clause(eb['error']['message'])}, and its forward is flat in every "
                "leaf (finite differences are 0): there is no gradient to keep, and a fix "
                "that gives the objective one must change it; check the new objective yourself"
            )
        steepest = max((abs(v) for v in values), default=math.nan)
        raise _Rejected(
            f"{mismatch}; before's forward depends on the leaves (finite differences up to "
            f"{_format(steepest)}) though its graph was cut: the fix must keep its values"
        )

    def _check_stale_roots(self) -> None:
        """After differentiates at call ``i`` the very value it differentiated at an earlier
        call although the leaves changed in place in between (an optimizer stepped them):
        a forward made once and backpropagated again with ``retain_graph=True``, whose
        gradients are those of parameters that no longer exist. Positive evidence, not
        a matter of intent."""
        events = self.after.get("events") or []
        for i, event in enumerate(events):
            roots = [_values(root) for root in event.get("roots", [])]
            if not roots or not any(roots):
                continue
            for j in range(i):
                earlier = events[j]
                same = roots == [_values(root) for root in earlier.get("roots", [])]
                if same and self._stepped_inputs(earlier, event):
                    raise _Rejected(
                        f"after's backward call #{i + 1}{_at_line(event.get('line'))} "
                        f"differentiates the value of call #{j + 1} again, though the leaves "
                        "changed in place in between (a stale forward: its gradient is that "
                        "of parameters since stepped)"
                    )

    @staticmethod
    def _stepped_inputs(earlier: dict[str, Any], event: dict[str, Any]) -> bool:
        """Some leaf changed in place between the two calls (its version, or the sum of
        its values, which sees `.data` writes) and the later call's root depends on it
        (a nonzero gradient): a value computed from it before the change."""
        for k, grad in (event.get("grads") or {}).items():
            if grad is None or not any(v != 0 for v in _values(grad)):
                continue
            for key in ("versions", "sums"):
                old, new = earlier.get(key) or [], event.get(key) or []
                if int(k) < min(len(old), len(new)) and old[int(k)] != new[int(k)]:
                    return True
        return False

    def _check_forward_reference(self) -> None:
        """AFTER's first backward call against BEFORE's forward with autograd off (see
        ``compare_traces``): before the first optimizer step both compute the same."""
        reference = self.forward_reference or {}
        events_r, events_a = reference.get("events") or [], self.after.get("events") or []
        if not events_r or not events_a:
            return
        label = f"backward call #1{_at_line(events_a[0].get('line'))}"
        mismatch = self._roots_mismatch(events_r[0], events_a[0], label)
        if mismatch is not None:
            raise _Rejected(
                f"{mismatch} (before, run with autograd off up to that call, computes the "
                "value the fix must keep)"
            )
        self.notes.append(f"{label}: the forward results equal before's with autograd off")

    def _eps_guard(self, eb: dict[str, Any], ea: dict[str, Any], label: str) -> bool:
        """Whether AFTER's forward moved off BEFORE's only by an eps guard: BEFORE's gradient
        at this call is not finite (the guard's reason, ``sqrt(mse + 1e-8)``, ``acos`` of
        a clamped cosine) and every result moved by at most ``EPS_GUARD`` (absolute, and
        relative to the result). The gradients are still judged as usual; the verdict
        says how far the forward moved."""
        if self.broken_at is not None or not _non_finite_gradient(eb):
            return False
        worst = 0.0
        for rb, ra in zip(eb.get("roots", []), ea.get("roots", [])):
            for e, a in zip(_values(rb), _values(ra)):
                if not math.isfinite(a) or (
                    math.isfinite(e) and abs(a - e) > EPS_GUARD * (1 + abs(e))
                ):
                    return False
                if math.isfinite(e):
                    worst = max(worst, abs(a - e))
        self.eps_guarded.append({"event": ea.get("index"), "moved": worst})
        self.notes.append(
            f"{label}: before's gradient is not finite and the fix moves the forward by "
            f"at most {_format(worst)} (an eps guard)"
        )
        return True

    def _forward_mismatch(
        self, expected: list[float], actual: list[float], what: str, nan_matters: bool = False
    ) -> str | None:
        """Where ``expected`` is finite, ``actual`` must be close; elsewhere it is undefined
        (``nan_matters``: after a broken gradient, a nan in before that after does not
        have shows the trajectories parted)."""
        for j, (e, a) in enumerate(zip(expected, actual)):
            if not math.isfinite(e):
                if nan_matters and math.isfinite(a):
                    return (
                        f"forward results part: {what} is {_format(e)} at element {j} "
                        f"in before, {_format(a)} in after"
                    )
                continue
            if not abs(a - e) <= FORWARD_ATOL + FORWARD_RTOL * abs(e):
                return (
                    f"forward changed: {what} differs at element {j}: before "
                    f"{_format(e)}, after {_format(a)} (rtol {FORWARD_RTOL}, "
                    f"atol {FORWARD_ATOL})"
                )
            self.forward.add(a, e)
        return None

    def _event_keys(self, eb: dict[str, Any] | None, ea: dict[str, Any]) -> list[int]:
        keys_a = set(ea.get("grads", {}))
        if eb is None or eb.get("error"):
            keys = keys_a
        elif eb.get("kind") == "grad":
            keys = set(eb.get("grads", {}))
        elif ea.get("kind") == "grad":
            keys = keys_a
        else:
            keys = keys_a | set(eb.get("grads", {}))
        return sorted(int(k) for k in keys)

    def _compare_event_grads(
        self, i: int, eb: dict[str, Any], ea: dict[str, Any], label: str
    ) -> None:
        for k in self._event_keys(eb, ea):
            self._require_leaf(k, label)
            key = str(k)
            if key not in ea.get("grads", {}):
                raise _Rejected(
                    f"after: {label} does not compute the gradient of {self._leaf_name(k)}"
                )
            grad_a = ea["grads"][key]
            if eb.get("error"):
                self._mark_broken(i)
                self._compare_to_fd("before", i, k, grad_a, None, label)
                continue
            bound = self._bound_value(eb, ea, k)
            if bound is not None:
                self._compare_to_bound_value(k, bound, eb["bound_grads"][bound], grad_a, label)
                # before's program reads None from `.grad` of its non-leaf: it cannot train
                # the value, so its later trajectory is no reference for the fix's
                self._mark_broken(i)
                continue
            grad_b = eb.get("grads", {}).get(key)
            if _discarded(eb, k) and _discarded(ea, k) and not _same_gradient(grad_b, grad_a):
                self.discarded_gradients.append({"event": i, "leaf": k})
                continue  # what this call gives the leaf, neither program ever reads
            if grad_b is None and grad_a is None:
                self._check_no_gradient(i, k, label)
                continue
            if grad_b is None or not all(math.isfinite(v) for v in _values(grad_b)):
                self._mark_broken(i)
            self.leaves_compared.add(k)
            self._require_finite(grad_a, k, label)
            if grad_b is None:
                self._compare_to_fd("before", i, k, grad_a, None, label)
                continue
            if grad_a is None:
                raise _Rejected(
                    f"after: {label} leaves the gradient of {self._leaf_name(k)} "
                    "None where before computes one"
                )
            self._compare_to_autograd(i, k, grad_b, grad_a, label)

    def _check_stale_gradient(
        self, i: int, eb: dict[str, Any], ea: dict[str, Any], label: str
    ) -> None:
        """For a fix that changes what trains (GF405 clears the gradients each iteration):
        where before's call adds its gradient (equal to after's, compared above) to a
        stale one never cleared, and after's does not, what before's optimizer step reads
        is no longer the derivative of that step's loss: its gradient is broken there, and
        its later trajectory no reference (the fix is then compared against its own
        finite differences)."""
        if not self.changes_training or self.broken_at is not None:
            return
        stale = set(eb.get("accumulated") or ()) - set(ea.get("accumulated") or ())
        stale &= {int(k) for k, g in (ea.get("grads") or {}).items() if g is not None}
        if not stale:
            return
        self._mark_broken(i)
        self.stale_at = i
        self.cleared = stale
        self.notes.append(
            f"before: {label} adds to the gradient left by earlier calls of "
            f"{self._leaf_list(sorted(stale))} (never cleared), so its optimizer steps on a "
            "sum of stale gradients; the fix's gradient is this call's own"
        )

    def _check_fix_clears(self) -> None:
        """Before's trajectory was dropped as a reference for stale gradients: the fix
        must then never add to a stale gradient of the leaves it clears, and its optimizer
        must still step every leaf before's steps (a reset after ``backward()`` would
        leave none). A leaf no optimizer clears (an input that requires grad) may still
        accumulate in both."""
        for event in self.after.get("events") or []:
            stale = sorted(set(event.get("accumulated") or ()) & self.cleared)
            if stale:
                raise _Rejected(
                    f"after: backward call #{event['index'] + 1}{_at_line(event.get('line'))}"
                    f" still adds to a stale gradient of {self._leaf_list(stale)}"
                )
        missing = sorted((_stepped(self.before) or set()) - (_stepped(self.after) or set()))
        if missing:
            raise _Rejected(
                f"after's optimizer never steps {self._leaf_list(missing)}, which before's "
                "steps between backward calls"
            )

    def _check_no_gradient(self, i: int, k: int, label: str) -> None:
        """A leaf without gradient in both versions: the rewrite may have kept the bug (a
        ``.data`` read replaced by ``.detach()`` still cuts the parameter off). Finite
        differences of AFTER's forward at a few elements must be zero; checked once per
        leaf, at the first call that leaves it without gradient."""
        if k in self.no_gradient_either or k in self.not_compared:
            return
        why_not = self._no_gradient_expected(i, k)
        if why_not is not None:
            self.not_compared[k] = f"no gradient in either version; {why_not}"
            return
        numel = self._leaf_numel(k)
        elements = sorted({(numel - 1) * q // 3 for q in range(4)}) if numel else None
        try:
            entry = self._fd_entry("after", i, k, elements)
        except _Unverifiable as exc:
            self.not_compared[k] = f"no gradient in either version; {exc}"
            return
        if entry is None:
            return  # planned (or missing: the verdict says so)
        for j, (value, _, noise, interval) in sorted(_estimates(entry).items()):
            low, high = _fd_bounds(0.0, noise, None)
            outside = value if interval is None else min(interval, key=abs)
            if math.isfinite(outside) and not low <= outside <= high:
                raise _Rejected(
                    f"gradient lost: {self._leaf_name(k)}: {label} leaves it without "
                    "gradient in both versions, but the fix's forward depends on it "
                    f"(finite-difference derivative {_estimate_text(value, interval)} at "
                    f"element {j}): the graph is still cut"
                )
        self.no_gradient_either.add(k)

    def _no_gradient_expected(self, i: int, k: int) -> str | None:
        """Why leaf ``k`` may end backward call ``i`` without gradient in both versions
        (None: it must not, unless the fix's forward does not depend on it)."""
        frozen = self.after["events"][i].get("frozen") or []
        if k in frozen:
            return "frozen (requires_grad is False at the call)"
        if self._declared(k) or self.check_torch_made:
            return None
        # torch made it (a submodule's weight): frozen on purpose, like a teacher's
        if not self.rules:
            return "made by torch, not declared (no rule said the fix restores a gradient)"
        return (
            f"made by torch, not declared, and the fix of {', '.join(self.rules)} "
            "is not meant to give it one"
        )

    def _declared(self, k: int) -> bool:
        leaves = self.after.get("leaves", [])
        return k >= len(leaves) or bool(leaves[k].get("declared", True))

    def _leaf_numel(self, k: int) -> int:
        leaves = self.after.get("leaves", [])
        return math.prod(leaves[k].get("shape", [])) if k < len(leaves) else 0

    def _bound_value(self, eb: dict[str, Any], ea: dict[str, Any], k: int) -> str | None:
        """The module-level name whose non-leaf value in BEFORE became leaf ``k`` in AFTER.

        ``w = torch.randn(3, requires_grad=True) * 0.01`` -> ``w = (torch.randn(3) *
        0.01).requires_grad_()``: BEFORE's leaf ``k`` has no name (nothing can read its
        gradient), AFTER's leaf ``k`` is bound to ``w`` at this call and holds the value
        BEFORE's non-leaf ``w`` holds, and BEFORE recorded the gradient w.r.t. that
        non-leaf. (``eta = eta * 2`` -> ``eta_scaled = eta * 2`` keeps the leaf under
        ``eta``, with another value: not this case.) A leaf BEFORE could reach by name keeps its own
        reference, so a rewrite cannot move a gradient away from a leaf the user holds.
        """
        held_a = ea.get("bound_values") or {}
        held_b = eb.get("bound_values") or {}
        if k in self.before.get("global_leaf_index", {}).values() or any(
            entry.get("leaf") == k for entry in held_b.values()
        ):
            return None
        bound = [
            n
            for n, entry in held_a.items()
            if entry.get("leaf") == k
            and n in (eb.get("bound_grads") or {})
            and n in held_b
            and _same_values(held_b[n]["value"], entry["value"])
        ]
        return bound[0] if len(bound) == 1 else None

    def _compare_to_bound_value(
        self,
        k: int,
        name: str,
        grad_b: dict[str, Any] | None,
        grad_a: dict[str, Any] | None,
        label: str,
    ) -> None:
        what = f"{self._leaf_name(k)}, bound to '{name}' where before binds a non-leaf to it"
        note = (
            f"{self._leaf_name(k)} compared with the gradient of before's non-leaf "
            f"'{name}' (the value the name holds)"
        )
        if note not in self.notes:
            self.notes.append(note)
        self._require_finite(grad_a, k, label)
        if grad_b is None:
            return  # before's value was not reached by this call
        if grad_a is None:
            raise _Rejected(
                f"after: {label} leaves the gradient of {what} None where before computes one"
            )
        expected, actual = _values(grad_b), _values(grad_a)
        if len(expected) != len(actual):
            raise _Rejected(
                f"after: {label} gives {what} a gradient of {len(actual)} "
                f"elements, before's value has {len(expected)}"
            )
        self.leaves_compared.add(k)
        for j, (e, a) in enumerate(zip(expected, actual)):
            if math.isfinite(e) and abs(a - e) > GRAD_ATOL + GRAD_RTOL * abs(e):
                raise _Rejected(
                    f"gradient changed: {label} gives {what} the gradient "
                    f"{_format(a)} at element {j}, before's gives {_format(e)}"
                )
            if math.isfinite(e):
                self.gradient.add(a, e)
                self.values_checked.add(k)

    def _broken_call(self) -> int:
        """1-based number of the first backward call where before's gradient is broken."""
        return (self.broken_at or 0) + 1

    def _mark_broken(self, i: int) -> None:
        if self.broken_at is None:
            self.broken_at = i

    def _self_check_event(self, i: int, ea: dict[str, Any]) -> None:
        """AFTER's gradients at event i against finite differences of AFTER itself."""
        label = f"backward call #{i + 1}{_at_line(ea.get('line'))}"
        for k in self._event_keys(None, ea):
            if _discarded(ea, k):
                # the fix's program resets it unread: no value of it changes anything
                self.discarded_gradients.append({"event": i, "leaf": k})
                continue
            grad_a = ea["grads"][str(k)]
            self._compare_to_fd("after", i, k, grad_a, None, label)
        self.self_checked_events += 1

    def _require_leaf(self, k: int, label: str) -> None:
        if k >= len(self.before.get("leaves", [])):
            raise _Rejected(
                f"after creates {self._leaf_name(k)} that requires grad and "
                f"reaches {label}; before has no such leaf"
            )

    def _leaf_name(self, k: int, trace: dict[str, Any] | None = None) -> str:
        trace = trace or self.after
        leaves = trace.get("leaves", [])
        name = self._parameter_name(k, trace)
        if k < len(leaves):
            leaf = leaves[k]
            return f"leaf {k}{name} ({leaf.get('origin')}{_at_line(leaf.get('line'))})"
        return f"leaf {k}{name}"

    @staticmethod
    def _parameter_name(k: int, trace: dict[str, Any]) -> str:
        """`` 'model.lin.weight'`` when leaf ``k`` is a parameter of a module the script
        holds, else empty."""
        name = (trace.get("parameter_names") or {}).get(str(k))
        return f" '{name}'" if name else ""

    def _require_finite(self, grad: dict[str, Any] | None, k: int, label: str) -> None:
        if grad is None:
            return
        for j, value in enumerate(_values(grad)):
            if not math.isfinite(value):
                raise _Rejected(
                    f"after: {label} gives {self._leaf_name(k)} a non-finite "
                    f"gradient ({value}) at element {j}"
                )

    # ----------------------------------------------------------- references
    def _compare_to_autograd(
        self, i: int, k: int, grad_b: dict[str, Any], grad_a: dict[str, Any], label: str
    ) -> None:
        expected, actual = _values(grad_b), _values(grad_a)
        undefined, mismatched = [], []
        for j, (e, a) in enumerate(zip(expected, actual)):
            if not math.isfinite(e):
                undefined.append(j)
            elif abs(a - e) <= GRAD_ATOL + GRAD_RTOL * abs(e):
                self.gradient.add(a, e)
                self.values_checked.add(k)
            else:
                mismatched.append(j)
        if not mismatched:
            if undefined:
                self._compare_to_fd("before", i, k, grad_a, undefined, label)
            return
        # Before's autograd gradient is the reference unless finite differences of its
        # forward disprove it (a silent graph cut); its trajectory is then no reference
        # either. Marked now so that the planning run also plans the later calls.
        self._mark_broken(i)
        changed = _GradientChange(label, self._leaf_name(k), expected, actual)
        try:
            entry = self._fd_entry(
                "before", i, k, sorted(undefined + mismatched), precise=True, claims=actual
            )
        except _Unverifiable as exc:
            raise _Rejected(
                f"{changed.message(mismatched[0])}; finite differences of "
                f"before's forward could not check it: {exc}"
            ) from None
        if entry is None and self.planning:
            return  # decided once the estimates are there
        if entry is None and not self.estimable:
            # no harness can estimate here (``--cmd``): a changed gradient is neither
            # proven nor disproven (GF103's fix moves the leaf past a scale on purpose)
            raise _Unverifiable(
                f"{changed.message(mismatched[0])}; finite differences, which would "
                "check it, cannot run under --cmd; verify it without --cmd or with --entry"
            )
        if entry is None:
            raise _Rejected(
                f"{changed.message(mismatched[0])}; finite differences of "
                "before's forward were not computed to check it"
            )
        self._check_silent_cut(i, k, entry, mismatched, changed)
        if undefined:
            self._check_fd_entry("before", i, k, grad_a, entry, undefined, label)

    def _check_silent_cut(
        self, i: int, k: int, entry: dict[str, Any], mismatched: list[int], changed: _GradientChange
    ) -> None:
        """Accept AFTER's differing elements only where finite differences of BEFORE's
        forward agree with AFTER and not with BEFORE's autograd gradient."""
        estimates = _estimates(entry)
        judged = [j for j in mismatched if j in estimates]
        if judged and self.fd_details.get("capped"):
            # the budget spread over many elements: those estimated decide, the others
            # are not compared (counted in the evidence, as for any capped reference)
            self.fd_details["uncompared"] += len(mismatched) - len(judged)
        else:
            judged = mismatched
        judgements = [
            (j, self._judge_changed_element(j, estimates.get(j), changed, entry)) for j in judged
        ]
        found = [dict(judged_j, event=i, leaf=k) for _, judged_j in judgements if judged_j]
        if not found:
            raise _Unverifiable(
                f"{changed.message(judged[0])}; before's forward has no derivative there "
                "(finite differences do not converge: a discontinuity inside the step), "
                "so neither gradient can be checked"
            )
        self.silent_cuts.extend(found)
        self.values_checked.add(k)
        first = found[0]
        self.notes.append(
            f"{changed.label}, {changed.leaf}: before's autograd gradient differs from finite "
            "differences of its forward (a silent graph cut): compared against finite "
            f"differences at {len(found)} element(s), e.g. element {first['element']}: "
            f"before's autograd {_format(first['before_autograd'])}, after "
            f"{_format(first['after'])}, finite differences "
            f"{_estimate_text(first['finite_difference'], first['interval'])}"
        )

    def _judge_changed_element(
        self,
        j: int,
        estimate: tuple[float, str, float, Any] | None,
        changed: _GradientChange,
        entry: dict[str, Any],
    ) -> dict[str, Any] | None:
        """The evidence of a silent graph cut at element ``j``, a rejection, or None where
        before's forward has no derivative (left out)."""
        if estimate is None:
            raise _Rejected(
                f"{changed.message(j)}; no finite-difference estimate of "
                "before's forward was computed there to check it"
            )
        value, method, noise, interval = estimate
        if method in NO_DERIVATIVE:
            # a quotient across a discontinuity is no derivative: nothing to judge by
            self.fd_details["left_out"].append({"source": "before", "element": j, "method": method})
            return None
        if not math.isfinite(value):
            raise _Rejected(
                f"{changed.message(j)}; the finite-difference derivative of "
                "before's forward is undefined there"
            )
        low, high = _fd_bounds(value, noise, interval)
        before, after = changed.before[j], changed.after[j]
        shown = _estimate_text(value, interval)
        if low <= before <= high:
            if interval is None and low <= after <= high:
                # float32's estimate cannot tell them apart: the float64 one decides
                refined = self._judge_precisely(j, changed, entry)
                if refined is not None:
                    return refined
            raise _Rejected(
                f"{changed.message(j)}; the finite-difference derivative of "
                f"before's forward agrees with before's autograd: {shown}"
                + self._precise_missing(entry)
            )
        if not low <= after <= high and interval is None:
            # float32's quotient says after is wrong: float64 decides where it can
            refined = self._judge_precisely(j, changed, entry)
            if refined is not None:
                return refined
        if not low <= after <= high:
            raise _Rejected(
                f"gradient wrong: {changed.label} gives {changed.leaf} the "
                f"gradient {_format(after)} at element {j}, the finite-difference "
                f"derivative of before's forward is {shown} (before's autograd "
                f"gives {_format(before)}; rtol {FD_RTOL}, atol "
                f"{_format(FD_ATOL + noise)})"
            )
        if interval is None:
            self.finite.add(after, value)
        else:
            self.kink_checks += 1
        return {
            "element": j,
            "before_autograd": before,
            "after": after,
            "finite_difference": value,
            "method": method,
            "interval": None if interval is None else list(interval),
        }

    def _judge_precisely(
        self, j: int, changed: _GradientChange, entry: dict[str, Any]
    ) -> dict[str, Any] | None:
        """The evidence of a silent graph cut at element ``j`` by the float64 estimate
        (accepted where it agrees with after's gradient and not with before's), a
        rejection, or None when there is no float64 estimate there."""
        found = _float64_estimates(entry)
        if j not in found:
            return None
        value, noise, error = found[j]
        tolerance = PRECISE_ATOL + noise + error + PRECISE_RTOL * abs(value)
        before, after = changed.before[j], changed.after[j]
        # the estimate's own error bound (rounding noise, truncation, float32 gradients):
        # where it separates the two gradients, it tells them apart although both are
        # within the customary tolerance
        bound = PRECISE_ATOL + noise + error + FLOAT32_GRADIENT * abs(value)
        d_before, d_after = abs(before - value), abs(after - value)
        if d_before <= tolerance and d_after <= tolerance:
            if d_after <= bound < d_before / 2:
                return self._precisely_accepted(j, before, after, value)
            if not d_before <= bound < d_after / 2:
                raise _Unverifiable(
                    f"{changed.message(j)}; the float64 finite-difference derivative of "
                    f"before's forward, {_format(value)}, cannot tell the two apart"
                )
        if d_before <= tolerance:
            raise _Rejected(
                f"{changed.message(j)}; the float64 finite-difference derivative of "
                f"before's forward agrees with before's autograd: {_format(value)}"
            )
        if abs(after - value) > tolerance:
            raise _Rejected(
                f"gradient wrong: {changed.label} gives {changed.leaf} the gradient "
                f"{_format(after)} at element {j}, the float64 finite-difference "
                f"derivative of before's forward is {_format(value)} (before's autograd "
                f"gives {_format(before)}; rtol {PRECISE_RTOL}, atol {_format(tolerance)})"
            )
        return self._precisely_accepted(j, before, after, value)

    def _precisely_accepted(
        self, j: int, before: float, after: float, value: float
    ) -> dict[str, Any]:
        self.finite.add(after, value)
        self.fd_details["float64"] = self.fd_details.get("float64", 0) + 1
        return {
            "element": j,
            "before_autograd": before,
            "after": after,
            "finite_difference": value,
            "method": "float64",
            "interval": None,
        }

    @staticmethod
    def _precise_missing(entry: dict[str, Any]) -> str:
        why = entry.get("precise_error")
        return f" (no float64 estimate: {why})" if why else ""

    def _compare_to_fd(
        self,
        source: str,
        i: int,
        k: int,
        grad_a: dict[str, Any] | None,
        elements: list[int] | None,
        label: str,
    ) -> None:
        """Compare AFTER's gradient with a finite-difference estimate (of ``source``)."""
        events = self.after.get("events") or []
        if grad_a is None and i < len(events) and k in (events[i].get("frozen") or []):
            # ``E.requires_grad = False`` before the call: no gradient is expected
            self.not_compared.setdefault(k, "frozen (requires_grad is False at the call)")
            return
        self._require_finite(grad_a, k, label)
        claims = _values(grad_a) if grad_a is not None else None
        entry = self._fd_entry(source, i, k, elements, claims=claims)
        if entry is None:
            return
        self.leaves_compared.add(k)
        self._check_fd_entry(source, i, k, grad_a, entry, elements, label)

    def _check_fd_entry(
        self,
        source: str,
        i: int,
        k: int,
        grad_a: dict[str, Any] | None,
        entry: dict[str, Any],
        elements: list[int] | None,
        label: str,
    ) -> None:
        actual = _values(grad_a) if grad_a is not None else None
        wanted = None if elements is None else set(elements)
        if entry.get("unused"):
            for j, value in enumerate(actual or []):
                if wanted is None or j in wanted:
                    self._check_fd_element(k, j, value, 0.0, 0.0, source, label)
            return
        done = set()
        padding = set(self._padding_elements(source, i, k))
        intervals = entry.get("intervals") or [None] * len(entry["indices"])
        for j, value, method, noise, interval in zip(
            entry["indices"], entry["values"], entry["methods"], entry["noise"], intervals
        ):
            if (wanted is not None and j not in wanted) or j in padding:
                continue
            done.add(j)
            a = actual[j] if actual is not None and j < len(actual) else None
            self._check_fd_estimate(
                source, i, k, j, a, float(value), method, float(noise), interval, label, entry
            )
        requested = entry.get("requested", 0) if wanted is None else len(wanted)
        self.fd_details["uncompared"] += max(0, requested - len(done))

    def _padding_elements(self, source: str, i: int, k: int) -> list[int]:
        """The elements of leaf ``k`` in an embedding's ``padding_idx`` row at call ``i``."""
        trace = self.before if source == "before" else self.after
        events = trace.get("events") or []
        event = events[i] if i < len(events) else {}
        return list((event.get("padding_rows") or {}).get(str(k), []))

    def _check_fd_estimate(
        self,
        source: str,
        i: int,
        k: int,
        j: int,
        actual: float | None,
        estimate: float,
        method: str,
        noise: float,
        interval: list[float] | None,
        label: str,
        entry: dict[str, Any],
    ) -> None:
        where = {"source": source, "event": i, "leaf": k, "element": j}
        if method in NO_DERIVATIVE:
            self.fd_details["left_out"].append(dict(where, method=method))
        elif not math.isfinite(estimate):
            self.fd_details["undefined"] += 1
            self.undefined_at[k] = self.undefined_at.get(k, 0) + 1
        elif method == "kink" and interval is not None:
            low, high = float(interval[0]), float(interval[1])
            self.fd_details["kinks"].append(dict(where, interval=[low, high]))
            self._check_fd_interval(k, j, actual, low, high, noise, source, label)
        else:
            if method != "central":
                self.fd_details["one_sided"].append(dict(where, method=method))
            self._check_fd_element(
                k, j, actual, estimate, noise, source, label, confirmed_in=(i, entry)
            )

    def _check_fd_element(
        self,
        k: int,
        j: int,
        actual: float | None,
        estimate: float,
        noise: float,
        source: str,
        label: str,
        confirmed_in: tuple[int, dict[str, Any]] | None = None,
    ) -> None:
        """``actual`` None: AFTER left ``.grad`` None, which is right only for zero.
        ``confirmed_in``: the backward call and the finite-difference entry of an estimate
        (None: an exact zero, nothing to confirm).

        A float32 quotient that disagrees with the gradient rejects it only once the
        program's float64 replay agrees with the quotient (a converged, consistent
        disagreement); where float64 agrees with the gradient it is accepted (float32's
        rounding through a deep network, not the fix); where there is no float64 estimate
        yet, one is asked for (``confirm``), and without one the fix is unverified."""
        atol = FD_ATOL + noise
        value = 0.0 if actual is None else actual
        if not abs(value - estimate) <= atol + FD_RTOL * abs(estimate):
            whose = "before's forward" if source == "before" else "the fix's own forward"
            got = "no gradient (None)" if actual is None else _format(value)
            disagreement = (
                f"gradient wrong: {label} gives {self._leaf_name(k)} the "
                f"gradient {got} at element {j}, the finite-difference "
                f"derivative of {whose} is {_format(estimate)} "
                f"(rtol {FD_RTOL}, atol {_format(atol)})"
            )
            if confirmed_in is None:
                raise _Rejected(disagreement)
            event, entry = confirmed_in
            self._confirm_in_float64(source, event, k, j, value, estimate, entry, disagreement)
            return
        self.finite.add(value, estimate)
        self.values_checked.add(k)

    def _confirm_in_float64(
        self,
        source: str,
        event: int,
        k: int,
        j: int,
        value: float,
        estimate: float,
        entry: dict[str, Any],
        disagreement: str,
    ) -> None:
        found = _float64_estimates(entry)
        if j in found:
            wide, noise, error = found[j]
            tolerance = PRECISE_ATOL + noise + error + (PRECISE_RTOL + FLOAT32_GRADIENT) * abs(wide)
            if abs(value - wide) <= tolerance:
                self.finite.add(value, wide)
                self.values_checked.add(k)
                self.fd_details["float64_confirmed"] = (
                    self.fd_details.get("float64_confirmed", 0) + 1
                )
                return
            if abs(estimate - wide) > FD_ATOL + noise + error + FD_RTOL * abs(wide):
                raise _Unverifiable(
                    f"{disagreement}; in float64 it is {_format(wide)}: the quotients do "
                    "not agree between precisions (kinks or rounding inside the step), so "
                    "they decide nothing"
                )
            raise _Rejected(f"{disagreement}; in float64 it is {_format(wide)}")
        why = entry.get("precise_error")
        if why == OWN_FLOAT64:
            raise _Rejected(disagreement)  # the quotient was float64 already
        if why or self.confirmed:
            raise _Unverifiable(
                f"{disagreement}, but float32's quotients are not trusted alone and "
                f"float64 could not confirm it ({why or 'no estimate'})"
            )
        self.confirm.append(
            {
                "source": source,
                "event": event,
                "leaf": self._runner_leaf(source, k),
                "elements": [j],
                "precise": True,
            }
        )
        raise _Unverifiable(f"{disagreement}; to be confirmed in float64")

    def _check_fd_interval(
        self,
        k: int,
        j: int,
        actual: float | None,
        low: float,
        high: float,
        noise: float,
        source: str,
        label: str,
    ) -> None:
        """At a kink any gradient between the left and right slopes is acceptable."""
        value = 0.0 if actual is None else actual
        lower, upper = _fd_bounds(low, noise, (low, high))
        if not lower <= value <= upper:
            whose = "before's forward" if source == "before" else "the fix's own forward"
            got = "no gradient (None)" if actual is None else _format(value)
            raise _Rejected(
                f"gradient wrong: {label} gives {self._leaf_name(k)} the "
                f"gradient {got} at element {j}, where {whose} has a kink with "
                f"slopes {_format(low)} and {_format(high)} on either side"
            )
        self.kink_checks += 1
        self.values_checked.add(k)

    def _runner_leaf(self, source: str, k: int) -> int:
        """Leaf ``k`` as ``source``'s runs number it (BEFORE's, when the fix left some out)."""
        if source == "before" and self.before_leaves is not None:
            return self.before_leaves[k]
        return k

    def _fd_entry(
        self,
        source: str,
        i: int,
        k: int,
        elements: list[int] | None,
        precise: bool = False,
        claims: list[float] | None = None,
    ) -> dict[str, Any] | None:
        """``precise``: float64 estimates too (a possible silent graph cut); ``claims``:
        the gradient the estimates are to judge (the runner spends no convergence test on
        an element whose first quotient already agrees with it)."""
        leaf = self._runner_leaf(source, k)
        target: dict[str, Any] = {"event": i, "leaf": leaf, "elements": elements}
        if precise:
            target["precise"] = True
        if claims is not None:
            wanted = range(len(claims)) if elements is None else elements
            target["claims"] = {
                str(j): claims[j] for j in wanted if j < len(claims) and math.isfinite(claims[j])
            }
        result = (self.fd or {}).get(source)
        if result is None:
            self.needs[source].append(target)
            return None
        failure = result.get("runner_error") or {}
        if failure or result.get("error"):
            detail = failure.get("message") or result.get("error")
            raise _Unverifiable(f"finite differences of {source} failed: {detail}")
        self._check_determinism(source, i, result)
        self.fd_consulted = True
        self.fd_details["capped"] = bool(self.fd_details.get("capped") or result.get("capped"))
        for entry in result.get("entries", []):
            if entry.get("event") == i and entry.get("leaf") == leaf:
                error = entry.get("error")
                if error and "did not exist" in error:
                    raise _Rejected(
                        f"after's {self._leaf_name(k)} reaches backward call "
                        f"#{i + 1}, but {source} has no such leaf at that point"
                    )
                if error:
                    raise _Unverifiable(f"finite differences of {source} failed: {error}")
                return entry
        self.needs[source].append(target)
        return None

    def _check_determinism(self, source: str, i: int, result: dict[str, Any]) -> None:
        if (source, i) in self._determinism_checked:
            return
        self._determinism_checked.add((source, i))
        trace = self.before if source == "before" else self.after
        events = trace.get("events", [])
        probe = result.get("probe_objectives", {}).get(str(i))
        if i >= len(events) or probe is None or events[i].get("objective") is None:
            return
        recorded, replayed = float(events[i]["objective"]), float(probe)
        if math.isfinite(recorded) and not abs(recorded - replayed) <= 1e-6 * (1 + abs(recorded)):
            raise _Unverifiable(
                f"{source} is not deterministic under a fixed seed: backward "
                f"call #{i + 1} differentiates {_format(recorded)} in one run "
                f"and {_format(replayed)} in another"
            )

    # --------------------------------------------------------------- globals
    def _compare_globals(self) -> None:
        if self.before["outcome"].get("status") != "ok":
            return
        if self.after["outcome"].get("status") != "ok":
            return
        tensors_b, tensors_a = self.before.get("globals", {}), self.after.get("globals", {})
        leaf_names = set(self.before.get("leaf_globals", [])) | set(
            self.after.get("leaf_globals", [])
        )
        for name in sorted(set(tensors_b) & set(tensors_a) - leaf_names):
            tb, ta = tensors_b[name], tensors_a[name]
            if tb.get("shape") != ta.get("shape") or tb.get("dtype") != ta.get("dtype"):
                self.notes.append(f"module-level '{name}' differs in shape or dtype; not compared")
                continue
            if self.diverged_at is not None:
                self.notes.append(f"module-level '{name}' not compared (trajectories parted)")
                continue
            mismatch = self._forward_mismatch(_values(tb), _values(ta), f"module-level '{name}'")
            if mismatch and self.broken_at is None:
                raise _Rejected(mismatch)
            if mismatch:
                self.notes.append(
                    f"{mismatch}; not a reference after before's broken gradient "
                    f"at backward call #{self._broken_call()}"
                )
                continue
            self.globals_compared.append(name)
