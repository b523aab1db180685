"""The oracle's tolerances, verdict type and the pure helpers over traces its comparisons share."""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gradfix.torch_facts.curated import BACKWARD_TWICE, NO_GRAD_FN

FORWARD_RTOL, FORWARD_ATOL = 1e-5, 1e-6


#: how far an eps guard may move a forward result whose gradient was not finite
EPS_GUARD = 1e-3


GRAD_RTOL, GRAD_ATOL = 1e-4, 1e-5


#: how close a float32 forward must be to before's float64 value where before's float32
#: one is not finite (float32's rounding over a network: a few parts in 10^5)
FLOAT64_FORWARD = 1e-4


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
#: float32 disagreements asked of float64 in one comparison (each a few runs of it)
CONFIRMED_AT_MOST = 12


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
    kept: dict[int, int] = {k: k for k in range(len(leaves_a))}  # BEFORE's leaf -> AFTER's
    if len(leaves_a) > len(leaves_b):
        # a fix that makes a plain tensor an ``nn.Parameter`` (GF109) adds leaves: BEFORE's
        # must still be there, in order, with AFTER's others the tensors it made leaves
        matched = _kept_leaves(leaves_a, leaves_b)
        if matched is None:
            return []
        kept = dict(enumerate(matched))
    elif len(leaves_a) < len(leaves_b):
        # a fix that no longer replaces a parameter (fills the one the optimizer holds):
        # BEFORE's leaves AFTER still makes, by the name the model binds them to
        named = kept_by_name(before, after)
        if named is None:
            return []
        kept = {old: k for k, old in enumerate(named)}
    trained_b, trained_a = _stepped(before), _stepped(after)
    if trained_b is None or trained_a is None:
        return []
    return sorted(trained_a - {kept[k] for k in trained_b if k in kept})


def kept_by_name(before: dict[str, Any], after: dict[str, Any]) -> list[int] | None:
    """BEFORE's leaves that AFTER still makes, in AFTER's order: a leaf the model binds to a
    name in both (``model.quantizer.scale``) is BEFORE's leaf of that name, which may not
    be the one made at the same line (BEFORE replaced it by a new parameter the model
    reads, leaving the first one unnamed); the others by line, shape and dtype, in order
    (:func:`_kept_leaves`). None when they do not line up."""
    leaves_b, leaves_a = before.get("leaves") or [], after.get("leaves") or []
    by_line = _kept_leaves(leaves_b, leaves_a)
    names_b = {str(v): int(k) for k, v in (before.get("parameter_names") or {}).items()}
    names_a = {int(k): str(v) for k, v in (after.get("parameter_names") or {}).items()}
    by_name = {k: names_b[name] for k, name in names_a.items() if name in names_b}
    events_b = before.get("events") or []
    if events_b and len(events_b[0].get("versions") or ()) != len(leaves_b):
        by_name = {}  # leaves made while training (layers built in each forward): by line
    named = _kept_by_name(leaves_b, leaves_a, by_name) if by_name else None
    if named is None or by_line is None or named == by_line:
        return by_line if by_line is not None else named
    # the name decides only where it shows the leaf the program uses: after's leaf gets
    # a gradient, as before's leaf of that name does, and not the one made at its line
    # (a parameter left unread since it was replaced)
    given_b, given_a = given_gradients(before), given_gradients(after)
    differs = [k for k in range(len(leaves_a)) if named[k] != by_line[k]]
    if all(k in given_a and named[k] in given_b and by_line[k] not in given_b for k in differs):
        return named
    return by_line


def given_gradients(trace: dict[str, Any]) -> set[int]:
    """The leaves some backward call of ``trace`` gives a nonzero gradient."""
    return {
        int(key)
        for event in trace.get("events") or ()
        for key, grad in (event.get("grads") or {}).items()
        if _nonzero(grad)
    }


def _kept_by_name(
    leaves_b: list[dict[str, Any]], leaves_a: list[dict[str, Any]], by_name: dict[int, int]
) -> list[int] | None:
    """AFTER's leaves matched to BEFORE's: by name where ``by_name`` has one, else by
    line, shape and dtype, in order; None when they do not line up."""
    kept: list[int] = []
    for k, leaf in enumerate(leaves_a):
        if k in by_name:
            old = by_name[k]
            if _leaf_key(leaves_b[old])[1:] != _leaf_key(leaf)[1:]:
                return None  # the same name, another shape or dtype
        else:
            start = kept[-1] + 1 if kept else 0
            old = next(
                (
                    j
                    for j in range(start, len(leaves_b))
                    if j not in by_name.values() and _leaf_key(leaves_b[j]) == _leaf_key(leaf)
                ),
                -1,
            )
            if old < 0:
                return None
        if kept and old <= kept[-1]:
            return None  # out of order
        kept.append(old)
    return kept


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


def moved_while_frozen(trace: dict[str, Any]) -> set[int]:
    """Leaves that change in place between two backward calls at both of which they do
    not require grad (an optimizer with momentum stepping a frozen layer on the stale
    `.grad` that ``zero_grad(set_to_none=False)`` leaves): by the calls' version counters."""
    events = trace.get("events") or []
    moved: set[int] = set()
    for earlier, later in zip(events, events[1:]):
        old, new = earlier.get("versions") or [], later.get("versions") or []
        frozen = set(earlier.get("frozen") or ()) & set(later.get("frozen") or ())
        moved.update(k for k in frozen if k < min(len(old), len(new)) and old[k] != new[k])
    return moved


def _read_by_steps(events: list[dict[str, Any]]) -> set[int]:
    """The leaves whose gradient some optimizer step reads (the calls' ``stepped_with``)."""
    return {int(k) for event in events for k in event.get("stepped_with") or ()}


def _kept_leaves(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> list[int] | None:
    """The leaves of BEFORE that AFTER still creates, in order (AFTER's leaves matched to a
    subsequence of BEFORE's by line, shape and dtype), or None when they do not match."""
    kept: list[int] = []
    for k, leaf in enumerate(before):
        if len(kept) < len(after) and _leaf_key(leaf) == _leaf_key(after[len(kept)]):
            kept.append(k)
    return kept if len(kept) == len(after) else None


def _leaf_key(leaf: dict[str, Any]) -> tuple[Any, ...]:
    """A leaf's creation statement (``match_line``: before's line in after's numbering,
    where the change moved it), shape and dtype."""
    line = leaf.get("match_line", leaf.get("line"))
    return (line, tuple(leaf.get("shape") or ()), leaf.get("dtype"))


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


class _FdRejected(_Rejected):
    """A rejection whose evidence is a finite-difference derivative of a forward; ``flat``:
    that derivative is zero there (a quantizer's, a spike's: where a program's own
    ``autograd.Function`` gives a surrogate gradient by design)."""

    def __init__(self, message: str, flat: bool = False) -> None:
        super().__init__(message)
        self.flat = flat


def _flat(value: float) -> bool:
    return math.isfinite(value) and abs(value) <= FD_ATOL


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
        a == e or abs(a - e) <= GRAD_ATOL + GRAD_RTOL * abs(e) for e, a in zip(expected, actual)
    )


def identical_runs(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """Whether two traces record the same run: both complete, with the same leaves, the
    same backward calls (their forward results, the gradient each gives each leaf, what
    each optimizer step reads: as many calls, each recorded one the same) and the same
    module-level values."""
    if any((t.get("outcome") or {}).get("status") != "ok" for t in (before, after)):
        return False
    if any("runner_error" in t for t in (before, after)):
        return False
    if bool(before.get("events_truncated")) != bool(after.get("events_truncated")):
        return False  # (both cut at the same call: the calls recorded are compared)
    if any(t.get("held") or t.get("dealiased") for t in (before, after)):
        return False  # a replay made to match: not the original's run
    leaves_b, leaves_a = before.get("leaves") or [], after.get("leaves") or []
    if [leaf.get("shape") for leaf in leaves_b] != [leaf.get("shape") for leaf in leaves_a]:
        return False
    events_b, events_a = before.get("events") or [], after.get("events") or []
    if before.get("event_count") != after.get("event_count") or len(events_b) != len(events_a):
        return False
    for eb, ea in zip(events_b, events_a):
        if eb.get("kind") != ea.get("kind") or bool(eb.get("error")) != bool(ea.get("error")):
            return False
        roots_b, roots_a = eb.get("roots") or [], ea.get("roots") or []
        if len(roots_b) != len(roots_a) or not all(map(_same_values, roots_b, roots_a)):
            return False
        grads_b, grads_a = eb.get("grads") or {}, ea.get("grads") or {}
        if set(grads_b) != set(grads_a):
            return False
        if not all(_same_gradient(grads_b[key], grads_a[key]) for key in grads_b):
            return False
        if sorted(eb.get("stepped_with") or ()) != sorted(ea.get("stepped_with") or ()):
            return False
    globals_b, globals_a = before.get("globals") or {}, after.get("globals") or {}
    return set(globals_b) == set(globals_a) and all(
        _same_values(globals_b[name], globals_a[name]) for name in globals_b
    )


def _nonzero(grad: dict[str, Any] | None) -> bool:
    """A recorded gradient that is there and not all zero (a call that reaches a leaf only
    through a zero, or not at all, gives it nothing)."""
    return grad is not None and any(v != 0 for v in _values(grad))


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


def _spread_elements(numel: int | None) -> list[int] | None:
    """Four elements spread over a leaf of ``numel`` values (first, last, two between)."""
    return sorted({(numel - 1) * q // 3 for q in range(4)}) if numel else None


def _off_zero(value: float, noise: float, interval: Any) -> float | None:
    """The estimate (the end of its interval nearest 0) when it is not 0 within its noise
    (a non-finite one included); None when the derivative is 0."""
    low, high = _fd_bounds(0.0, noise, None)
    outside = value if interval is None else min(interval, key=abs)
    return None if math.isfinite(outside) and low <= outside <= high else outside


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
