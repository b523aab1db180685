"""What one comparison of two traces holds, and how it names leaves."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from gradfix.verify.intent import NO_INTENT, FixIntent
from gradfix.verify.oracle.common import (
    _at_line,
    _Rejected,
    _Stats,
    _stepped,
    _values,
    given_gradients,
    identical_runs,
)


class _State:
    """The traces, the fix's intent, and what the checks found so far."""

    def __init__(
        self,
        before: dict[str, Any],
        after: dict[str, Any],
        fd: dict[str, Any] | None,
        planning: bool = False,
        intent: FixIntent = NO_INTENT,
        estimable: bool = True,
        changed: Iterable[str] = (),
        rebound: Iterable[str] = (),
    ) -> None:
        self.before: dict[str, Any] = before
        #: the names after's changed statements bind (``w``, ``self.w``)
        self.rebound = frozenset(rebound)
        #: ``file:line`` of after's lines the fix wrote (a failure there is the fix's)
        self.changed = set(changed)
        self.estimable = estimable
        self.after: dict[str, Any] = after
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
        #: BEFORE's event index (as its runs number them) at each position compared, when
        #: the change reordered the backward calls (matched by statement); None: in order
        self.before_events: list[int] | None = None
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
        #: the leaves AFTER was replayed with held, named while AFTER's numbering stands
        self.held_text = ""
        #: the leaves BEFORE was replayed with held (its own freeze, kept by AFTER), named
        self.before_held_text = ""
        self.broken_at: int | None = None  # first event where before's gradient is broken
        self.diverged_at: int | None = None  # first event whose forward parts from before's
        #: the call a rejection for a changed forward names (its index)
        self.forward_parted_at: int | None = None
        #: the first call whose gradient differs from before's, where earlier ones agree
        self.gradient_parted_at: int | None = None
        #: after's leaves past before's that are inputs of their own (``_new_input_leaf``)
        self.new_inputs: list[int] = []
        #: leaves after gives no (or a zero) gradient at a call before raised at
        self.none_where_flat: list[int] = []
        self._determinism_checked: set[tuple[str, int]] = set()
        self.fd_consulted = False
        self.silent_cuts: list[dict[str, Any]] = []  # elements where before's autograd is wrong
        # (call, leaf) whose gradients differ but are reset unread in both versions
        self.discarded_gradients: list[dict[str, int]] = []
        #: (call, leaf) gradients before's optimizer stepped although the call was another
        #: loss's (see ``_stops_leak``), which after no longer gives
        self.stopped_leaks: list[dict[str, int]] = []
        #: the constant after's objective is before's times (see ``_rescaled``), and where
        self.objective_scales: list[float] = []
        self.rescaled_calls: list[int] = []
        #: backward calls whose forward an eps guard moved (see ``_eps_guard``)
        self.eps_guarded: list[dict[str, Any]] = []
        #: finite-difference targets whose float32 disagreement float64 must confirm
        self.confirm: list[dict[str, Any]] = []
        #: the first disagreement waiting for them (the others are asked for together)
        self.to_confirm: str | None = None
        #: the stop-gradient the change adds that left the verdict unverified (its line)
        self.stop_gradient_intent = ""
        #: this comparison already has the float64 answers it asked for
        self.confirmed = any(result.get("confirmed") for result in (fd or {}).values())
        #: see ``compare_traces``
        self.forward_reference: dict[str, Any] | None = None
        #: before run in float64 where its float32 forward is not finite (see
        #: ``compare_traces``), and the calls whose forward after matches in it
        self.float64_reference: dict[str, Any] | None = None
        self.float64_forward: set[int] = set()
        #: after's first call computes what before computes with autograd off
        self.forward_referenced = False
        self.after_as_run: dict[str, Any] = after
        #: the two runs are the same run (see ``identical_runs``), before any line-up
        self.identical = identical_runs(before, after)
        self._line_up()

    def _line_up(self) -> None:
        """Match the two traces' leaves and calls before any check (see ``_Structure``)."""

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

    def _compared(self) -> list[int]:
        """The leaves at least one of whose gradient values was compared."""
        return sorted(self.leaves_compared & self.values_checked)

    def _uncompared(self) -> dict[int, str]:
        """Leaves of AFTER whose gradient no comparison covered, with the reason."""
        compared = set(self._compared())  # at some calls: not "not compared" at others
        found = {k: why for k, why in self.not_compared.items() if k not in compared}
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

    def _new_input_leaf(self, k: int) -> bool:
        """After's leaf ``k``, past before's, is a tensor a hand-made change made require
        grad (``requires_grad_()``: no parameter) that is an input of its own, not a cut:
        the program reads its gradient (a clone it trains, learn2learn's
        ``detach_module(keep_requires_grad=True)``), or with it backward reaches leaves
        before gave no gradient at all (an embedding output made to require grad so that
        a reentrant checkpoint passes gradients to the adapters inside it). A cut made a
        leaf (``x.detach().requires_grad_()``: a change that adds a stop-gradient) is
        none, nor a leaf whose gradient goes nowhere new."""
        count = len(self.before.get("leaves") or [])
        if k < count or self.intent.declared:
            return False
        if self.intent.adds_stop_gradient:
            return False  # ``x.detach().requires_grad_()``: the leaf of a cut it makes
        leaves_a = self.after.get("leaves") or []
        if k >= len(leaves_a) or "requires_grad" not in str(leaves_a[k].get("origin")):
            return False
        if leaves_a[k].get("in_backward"):
            return True  # autograd's own (a reentrant checkpoint's detached input)
        reads = self.after.get("grad_reads") or {}
        made = (leaves_a[k].get("origin"), leaves_a[k].get("line"))
        if any(
            reads.get(str(m)) and (leaf.get("origin"), leaf.get("line")) == made
            for m, leaf in enumerate(leaves_a)
            if m >= count
        ):
            return True  # the program reads the gradient one of them (made alike) gets
        given_a, given_b = given_gradients(self.after), given_gradients(self.before)
        if {j for j in given_a if j < count} - given_b:
            return True
        # an input made to require grad where every leaf before trains still gets its
        # gradient (a saliency map's image): it cuts nothing off, as a cut made a leaf
        # (``x.detach().requires_grad_()``) does the leaves before it
        return (
            k in given_a
            and not leaves_a[k].get("from_cut")
            and bool(given_b)
            and given_b <= given_a
        )

    def _at_changed_line(self, line: Any) -> bool:
        """Whether after's ``line`` is one the change wrote."""
        return line is not None and any(str(c).endswith(f":{line}") for c in self.changed)

    def _require_leaf(self, k: int, label: str) -> None:
        if k >= len(self.before.get("leaves", [])):
            raise _Rejected(
                f"after creates {self._leaf_name(k)} that requires grad and "
                f"reaches {label}; before has no such leaf"
            )

    def _require_finite(self, grad: dict[str, Any] | None, k: int, label: str) -> None:
        if grad is None:
            return
        for j, value in enumerate(_values(grad)):
            if not math.isfinite(value):
                raise _Rejected(
                    f"after: {label} gives {self._leaf_name(k)} a non-finite "
                    f"gradient ({value}) at element {j}"
                )

    def _broken_call(self) -> int:
        """1-based number of the first backward call where before's gradient is broken."""
        return (self.broken_at or 0) + 1

    def _mark_broken(self, i: int) -> None:
        if self.broken_at is None:
            self.broken_at = i

    def _declared(self, k: int) -> bool:
        leaves = self.after.get("leaves", [])
        return k >= len(leaves) or bool(leaves[k].get("declared", True))

    def _leaf_numel(self, k: int) -> int:
        leaves = self.after.get("leaves", [])
        return math.prod(leaves[k].get("shape", [])) if k < len(leaves) else 0

    def _runner_event(self, source: str, i: int) -> int:
        """Backward call ``i`` as ``source``'s runs number it (BEFORE's, when the change
        reordered the calls)."""
        if source == "before" and self.before_events is not None and i < len(self.before_events):
            return self.before_events[i]
        return i

    def _runner_leaf(self, source: str, k: int) -> int:
        """Leaf ``k`` as ``source``'s runs number it (BEFORE's, when the fix left some out)."""
        if source == "before" and self.before_leaves is not None:
            return self.before_leaves[k]
        return k
