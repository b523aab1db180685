"""Structure: do the two runs line up (outcomes, backward calls, leaves)?"""

from __future__ import annotations

import math
import re
from typing import Any

from gradfix.verify.oracle.common import (
    MAKE_FASTER,
    MAKE_VERIFIABLE,
    STRUCTURE_UNDECIDED,
    _at_line,
    _file_of,
    _kept_leaves,
    _nonzero,
    _outcome_text,
    _read_by_steps,
    _Rejected,
    _Unverifiable,
    _with_leaves,
    kept_by_name,
)
from gradfix.verify.oracle.state import _State

#: ``owner.grad`` in a statement's text: the expression whose gradient it reads
_GRAD_READ = re.compile(r"([A-Za-z_][\w.]*)\s*\.\s*grad\b(?!_)")


def _grad_owners(code: str) -> list[str]:
    """The names whose ``.grad`` a statement's text reads (``w``, ``self.w``)."""
    return _GRAD_READ.findall(code)


class _Structure(_State):
    """Leaves one version creates and the other does not are dropped (or the comparison
    stops); the runs' outcomes and counts are checked before any value is."""

    before: dict[str, Any]
    after: dict[str, Any]

    def _line_up(self) -> None:
        self.after_as_run = self.after  # every leaf after made, before any is dropped
        kept = [int(k) for k in self.before.get("held") or ()]
        self.before_held_text = ", ".join(self._leaf_name(k, self.before) for k in kept[:4]) + (
            f" and {len(kept) - 4} more" if len(kept) > 4 else ""
        )
        self._drop_uncreated_leaves()
        if self._held():
            self.held_text = self._leaf_list(self._held())
        self._drop_added_leaves()
        self._match_calls_by_statement()

    def _match_calls_by_statement(self) -> None:
        """A change that reorders the backward calls (a GAN's generator stepped before its
        discriminator instead of after): each of AFTER's calls is compared with BEFORE's
        call made by the same statement, the n-th time (by its text, whatever the line
        shift), when BEFORE's recorded calls are exactly AFTER's first ones reordered."""
        events_b, events_a = self.before.get("events") or [], self.after.get("events") or []
        if not events_b or len(events_a) < len(events_b):
            return
        if self.before.get("events_truncated"):
            return  # (AFTER's first calls are recorded however many it makes)
        codes_b = [event.get("code") for event in events_b]
        codes_a = [event.get("code") for event in events_a[: len(events_b)]]
        if not all(codes_b) or codes_a == codes_b or sorted(codes_a) != sorted(codes_b):
            return
        seen: dict[str, int] = {}
        order = []
        for code in codes_a:
            n = seen.get(code, 0)
            seen[code] = n + 1
            order.append([j for j, c in enumerate(codes_b) if c == code][n])
        self.before_events = order
        self.before = dict(self.before, events=[events_b[j] for j in order])
        self.notes.append(
            "the change reorders the backward calls: each is compared with before's call "
            "made by the same statement"
        )

    def _drop_uncreated_leaves(self) -> None:
        leaves_b, leaves_a = self.before.get("leaves", []), self.after.get("leaves", [])
        if len(leaves_a) >= len(leaves_b) or not self.intent.drops_leaves:
            return
        kept = kept_by_name(self.before, self.after)
        if kept is None:
            return  # rejected by the counts
        dropped = [leaves_b[k].get("line") for k in range(len(leaves_b)) if k not in kept]
        self.before = _with_leaves(self.before, kept)
        self.before_leaves = kept
        lines = ", ".join(f"line {line}" for line in dropped)
        self.notes.append(f"the fix creates without requires_grad the leaves made at {lines}")

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
        # a tensor before uses, wrapped by after as a parameter over its storage
        # (``nn.Parameter(torch.zeros(n, requires_grad=True))``): the parameter takes its
        # gradients, so it stands in its place
        rewraps = {
            k: int(m)
            for k in kept
            if (m := leaves_a[k].get("rewrapped_as")) is not None
            and int(m) not in kept
            and int(m) < len(leaves_a)
        }
        kept = [rewraps.get(k, k) for k in kept]
        added = [k for k in range(len(leaves_a)) if k not in kept]
        if any(self._stepped_in_after(k) and k not in held for k in added):
            return  # trained in the replay: not the values BEFORE computed with
        if any(k not in held and "Parameter" not in str(leaves_a[k].get("origin")) for k in added):
            return  # a tensor made to require grad (``out.requires_grad_()``): no parameter
        lines = ", ".join(self._short_leaf(k) for k in added)
        for k, m in rewraps.items():
            self.notes.append(
                f"{self._leaf_name(k)} is wrapped as {self._leaf_name(m)}, a parameter made "
                "over its storage: compared in its place"
            )
        new = {old: k for k, old in enumerate(kept)}
        self.after = _with_leaves(self.after, kept)
        self.after["held"] = [new[k] for k in sorted(held) if k in new]
        self.notes.append(
            f"the fix makes leaves of tensors before keeps plain ({lines}): held at their "
            "values in the replay; before has no gradient of them to compare"
        )

    # ------------------------------------------------------ whole-run checks
    def _check_nonleaf_grad_reads(self) -> None:
        """After reads ``N.grad`` of a tensor that is not a leaf (always ``None``) where
        ``N`` is a name the change binds (``s = s - lr * s.grad``, ``w = w.clone()``):
        the change made a non-leaf of what the program reads a gradient from. A read
        before makes at the same statement is the program's own (not the change's)."""
        if not self.rebound:
            return
        own = {read.get("code") for read in self.before.get("nonleaf_grad_reads") or ()}
        for read in self.after.get("nonleaf_grad_reads") or ():
            code = read.get("code") or ""
            if code in own:
                continue
            names = [name for name in _grad_owners(code) if name in self.rebound]
            if names:
                raise _Rejected(
                    f"after reads {names[0]}.grad at {read.get('where')}, but the change "
                    f"binds {names[0]} to a tensor that is not a leaf: its .grad is always "
                    "None there (autograd fills it only for leaves)"
                )

    def _check_untrained_new_leaves(self) -> None:
        """A leaf the change makes (at a line it wrote) gets a gradient, yet nothing ever
        reads that gradient while an optimizer step after it reads the gradients of other
        leaves: the change made a parameter no optimizer trains (weights kept in a plain
        list, a tensor given ``requires_grad`` but no ``nn.Parameter``)."""
        after = self.after_as_run  # leaves the line-up dropped as not trained included
        script, reads = after.get("script"), after.get("grad_reads")
        if script is None or reads is None:
            return
        lines = {
            int(line)
            for file, _, line in (place.rpartition(":") for place in self.changed)
            if file == script and line.isdigit()
        }
        events = after.get("events") or []
        for k, leaf in enumerate(after.get("leaves") or []):
            if leaf.get("line") not in lines or reads.get(str(k)):
                continue
            if after is self.after and self._new_input_leaf(k):
                continue  # an input it makes require grad, which no optimizer is to hold
            untrained = _untrained_since(events, k)
            if untrained is None:
                continue
            first, trained = untrained
            raise _Rejected(
                f"the change makes {self._leaf_name(k, after)}, which gets a gradient at "
                f"backward call #{first + 1}{_at_line(events[first].get('line'))}, but "
                f"nothing reads it: the optimizer steps {trained} other leaf tensor(s) and "
                "never this one (a parameter no optimizer trains)"
            )

    def _never_stepped(self) -> list[int]:
        """Leaves that backward calls give a gradient while no optimizer step in the run
        reads theirs, though steps after the first such call read other leaves' (a
        parameter no optimizer holds: left out of its groups, kept in a plain list)."""
        events = self.after.get("events") or []
        stepped = _read_by_steps(events)
        return [
            k
            for k in range(len(self.after.get("leaves") or []))
            if k not in stepped and _untrained_since(events, k) is not None
        ]

    def _starved(self) -> list[int]:
        """Leaves an optimizer holds that backward calls reach, but with nothing other than
        zeros at every call (an encoder behind ``round``, a head behind ``argmax`` made
        float): the optimizer steps them, yet they never train. (A parameter the graph
        never reaches, unused or frozen, gets no gradient at all: not among them.)"""
        events = self.after.get("events") or []
        if not events or self.after.get("events_truncated"):
            return []
        starved = []
        for k in self.after.get("optimized") or ():
            grads = [(e.get("grads") or {}).get(str(k)) for e in events]
            reached = [g for g in grads if g is not None]
            if reached and not any(_nonzero(g) or g.get("truncated") for g in reached):
                starved.append(int(k))
        return starved

    def _check_unfrozen_untrained(self) -> None:
        """A leaf frozen at every backward call of before (``requires_grad`` False),
        which after's calls give a gradient, while nothing reads that gradient (no optimizer
        step, no statement of the program) though steps after it read other leaves': the
        change unfreezes a parameter that no optimizer holds (``requires_grad_(True)``
        after the optimizer was built from the trainable ones), which then never trains."""
        before_events = self.before.get("events") or []
        if not before_events or self.before.get("events_truncated"):
            return
        given_before = {
            int(key)
            for e in before_events
            for key, grad in (e.get("grads") or {}).items()
            if grad is not None
        }
        # frozen at every call of before: the change unfroze it (not a gradient that now
        # merely reaches a leaf that required grad all along, a no_grad block removed)
        frozen_before = set.intersection(*(set(e.get("frozen") or ()) for e in before_events))
        after = self.after_as_run
        events = after.get("events") or []
        stepped = _read_by_steps(events)
        leaves_b = self.before.get("leaves") or []
        if len(after.get("leaves") or []) != len(leaves_b):
            return  # leaves made or dropped: their numbers need not name the same tensors
        reads = after.get("grad_reads") or {}
        for k in range(len(leaves_b)):
            if k in given_before or k not in frozen_before or k in stepped or reads.get(str(k)):
                continue  # the program reads it itself: an input's gradient (saliency)
            untrained = _untrained_since(events, k)
            if untrained is None:
                continue
            first, trained = untrained
            raise _Rejected(
                f"after's backward call #{first + 1}{_at_line(events[first].get('line'))} "
                f"gives {self._leaf_name(k, after)} a gradient, which no call of before "
                f"gives it, but no optimizer step reads it: the steps read {trained} other "
                "leaf tensor(s) (the change makes it require grad, yet no optimizer holds it)"
            )

    def _check_untrained_siblings(self) -> None:
        """The change makes the optimizer train leaves it never trained (held in the
        replay), yet a leaf made by the same statement (the bias of a layer whose weight
        it now trains) still gets a gradient that nothing reads: the fix trains part of
        what it registers by hand."""
        held, reads = set(self._held()), self.after.get("grad_reads")
        if not held or reads is None:
            return
        leaves = self.after.get("leaves") or []
        lines = {leaves[k].get("line") for k in held if k < len(leaves)} - {None}
        events = self.after.get("events") or []
        for k, leaf in enumerate(leaves):
            if k in held or leaf.get("line") not in lines or reads.get(str(k)):
                continue
            first = next((i for i, e in enumerate(events) if _gives(e, k)), None)
            if first is None or not any(e.get("stepped_with") for e in events[first:]):
                continue
            sibling = min(
                j for j in held if j < len(leaves) and leaves[j].get("line") == leaf.get("line")
            )
            raise _Rejected(
                f"the change makes the optimizer train {self._leaf_name(sibling)}, but "
                f"{self._leaf_name(k)}, made by the same statement, gets a gradient at "
                f"backward call #{first + 1}{_at_line(events[first].get('line'))} that "
                "nothing reads: it is still never trained"
            )

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
        if la > lb and not before_died and not all(self._new_input_leaf(k) for k in range(lb, la)):
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


def _untrained_since(events: list[dict[str, Any]], k: int) -> tuple[int, int] | None:
    """The first backward call that gives leaf ``k`` a gradient and how many leaves the
    first optimizer step after it reads, or None (no call gives it one, or no step
    follows: nothing shows what trains)."""
    first = next((i for i, e in enumerate(events) if _gives(e, k)), None)
    if first is None:
        return None
    steps = [e for e in events[first:] if e.get("stepped_with")]
    if not steps:
        return None
    return first, len({int(j) for j in steps[0]["stepped_with"]})


def _gives(event: dict[str, Any], k: int) -> bool:
    """Backward call ``event`` adds a nonzero gradient to leaf ``k``."""
    return not event.get("error") and _nonzero((event.get("grads") or {}).get(str(k)))
