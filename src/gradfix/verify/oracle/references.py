"""References: each backward call's forward results and gradients against before's (or the
forward reference, or finite differences where before gives none)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from typing import Any

from gradfix.torch_facts.curated import BACKWARD_TWICE, INPLACE_SAVED, LEAF_INPLACE
from gradfix.verify.oracle.common import (
    EPS_GUARD,
    FD_ATOL,
    FLOAT64_FORWARD,
    FORWARD_ATOL,
    FORWARD_RTOL,
    GRAD_ATOL,
    GRAD_RTOL,
    NO_DERIVATIVE,
    _at_line,
    _discarded,
    _estimate_text,
    _estimates,
    _FdRejected,
    _first_clause,
    _format,
    _GradientChange,
    _no_path_to_any_leaf,
    _non_finite_gradient,
    _nonzero,
    _off_zero,
    _read_by_steps,
    _Rejected,
    _reran_freed_graph,
    _same_gradient,
    _same_values,
    _short_outcome,
    _spread_elements,
    _stepped,
    _Unverifiable,
    _values,
)
from gradfix.verify.oracle.finite_differences import _FiniteDifferences

#: the saved tensor an in-place error names: ``[torch.FloatTensor [1, 8, 4, 4]]``
#: leaves whose gradient a change leaves as before's, at before's first cut, checked
#: against finite differences of before's forward (three elements each)
AGREED_LEAVES_CHECKED = 6
_SAVED_SHAPE = re.compile(r"\[torch\.\w+ \[([\d, ]*)\]\]")


class _References(_FiniteDifferences):
    """Compares each backward call of after with its reference: before's forward results
    and gradients, the forward reference, or finite differences."""

    diverged_at: int | None

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
        self._check_float64_forward(i, eb, ea, label)
        mismatch = self._roots_mismatch(eb, ea, label)
        if mismatch is not None and self._eps_guard(eb, ea, label):
            mismatch = None
        if mismatch is not None and _no_path_to_any_leaf(eb):
            self._judge_new_objective(i, eb, ea, label, mismatch)
            return
        if mismatch is not None and self.broken_at is None and self._rescaled(i, eb, ea):
            self.events_compared += 1
            return
        if mismatch is not None and self.rescaled_calls:
            # before's optimizer stepped on the unscaled gradients: its trajectory parts
            self._mark_broken(self.rescaled_calls[0])
        if mismatch is None:
            self._compare_event_grads(i, eb, ea, label)
            self._check_stale_gradient(i, eb, ea, label)
            self.events_compared += 1
            return
        if _reran_freed_graph(eb, self.before.get("events", [])[:i]):
            self._mark_broken(i)  # before's forward did not run again: its result is stale
        if self._stepped_under_its_graph(i, eb):
            self._mark_broken(i)  # the repair may compute this forward from the new values
        if self.broken_at is None:
            self._check_restored_accumulation(i)
        if self.broken_at is None and self._repair_may_change_forward():
            raise _Unverifiable(
                f"{mismatch}; before then raises {_short_outcome(self.before['outcome'])}, "
                "and its repair may start each step from a fresh state instead of "
                "detaching the carried one (a change made by hand declares neither): "
                "check that it computes what you meant, or let a rule's fix declare it"
            )
        if self.broken_at is None and self.intent.uses_discarded:
            raise _Unverifiable(
                f"{mismatch}; before discards the result of `{self.intent.uses_discarded}` "
                "(an op that returns a new tensor and changes nothing) and after uses it: the "
                "forward changes on purpose where that value enters, and whether the new one "
                "is meant is for you to check"
            )
        if self.broken_at is None:
            self.forward_parted_at = i
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

    def _stepped_under_its_graph(self, i: int, eb: dict[str, Any]) -> bool:
        """Before's call ``i`` raised "modified by an inplace operation" on a leaf that
        changed in place between its previous call and this one, after this call's forward
        read it (an optimizer step between a forward and its backward: a GAN's
        discriminator stepped before the generator's backward through it). Its repair may
        move the backward before the step (the forward kept) or compute the forward from
        the stepped values (the forward changed on purpose): before's gradient at ``i`` is
        broken and its trajectory from there no reference."""
        message = str((eb.get("error") or {}).get("message", ""))
        shape = _SAVED_SHAPE.search(message) if INPLACE_SAVED in message else None
        events = self.before.get("events") or []
        if shape is None or i == 0 or "versions" not in eb or "versions" not in events[i - 1]:
            return False
        # the leaf itself or a view of it (``weight.t()``, saved by a linear layer)
        numel = math.prod(int(n) for n in shape.group(1).split(",") if n.strip())
        old, new = events[i - 1]["versions"], eb["versions"]
        leaves = self.before.get("leaves") or []
        return any(
            old[k] != new[k] and numel <= math.prod(leaves[k].get("shape") or [])
            for k in range(min(len(old), len(new), len(leaves)))
        )

    def _repair_may_change_forward(self) -> bool:
        """A change made by hand (no declared intent) of a program that then backpropagates
        through a freed graph (a state carried from one step into the next): its repairs
        either detach the state (the forward kept) or start each step from a fresh state
        (the forward changed on purpose, the repair maintainers choose too), and runs cannot
        tell which was meant. The in-place errors are not such: their out-of-place repair
        computes the same values, so a forward change there is evidence."""
        outcome = self.before.get("outcome") or {}
        return (
            not self.intent.declared
            and outcome.get("category") == "code"
            and BACKWARD_TWICE in str(outcome.get("message", ""))
        )

    def _check_float64_forward(
        self, i: int, eb: dict[str, Any], ea: dict[str, Any], label: str
    ) -> None:
        """Before's forward at call ``i`` is nan or infinite in float32 where it is finite
        in float64 (a softmax underflowing to 0 before its ``log``): the float64 value is
        what the program means: after computing it (a stable form: ``log_softmax``) is
        judged by its own finite differences (before's gradients are not finite); after
        computing another value (an eps or a clamp that caps the loss) is unverified, the
        guard being the maintainers' choice as often as a wrong one."""
        reference = self.float64_reference or {}
        events = reference.get("events") or []
        if self.broken_at is not None or i >= len(events):
            return
        roots_b, roots_w, roots_a = (
            eb.get("roots", []),
            events[i].get("roots", []),
            ea.get("roots", []),
        )
        if not any(isinstance(v, str) for root in roots_b for v in root.get("values") or ()):
            return
        if len(roots_w) != len(roots_a) or len(roots_w) != len(roots_b):
            return
        for rw, ra in zip(roots_w, roots_a):
            wide, actual = _values(rw), _values(ra)
            if len(wide) != len(actual) or not all(math.isfinite(v) for v in wide):
                return  # not finite in float64 either: no reference here
            for j, (w, a) in enumerate(zip(wide, actual)):
                if not math.isfinite(a):
                    return  # judged as a non-finite result, as usual
                if abs(a - w) > FLOAT64_FORWARD * (1 + abs(w)):
                    # an eps or a clamp that guards the value changes the objective where
                    # float32 gives up: the maintainers' choice as often as a wrong one
                    raise _Unverifiable(
                        f"the result of {label} is not finite in before (float32); before "
                        f"run in float64 computes {_format(w)} at element {j}, after "
                        f"{_format(a)}: the change guards the forward (an eps, a clamp) "
                        "where float32 gives up, and whether that objective is the one "
                        "meant is for you to check"
                    )
        self.float64_forward.add(i)
        self.notes.append(
            f"{label}: before's forward is not finite in float32 and after's equals it in "
            "float64; after's gradients are compared with its own finite differences"
        )

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

    def _rescaled(self, i: int, eb: dict[str, Any], ea: dict[str, Any]) -> bool:
        """After's objective at call ``i`` is before's times one constant (a loss divided
        by the number of micro-batches it accumulates over), the same constant as at any
        earlier rescaled call, and each gradient the call gives is before's times it: the
        change scales the objective, not what it computes. Before's later trajectory,
        stepped with unscaled gradients, is then no reference."""
        if not self._rescales_the_loss(ea):
            return False
        ratio = _ratio(eb.get("roots") or [], ea.get("roots") or [], FORWARD_RTOL)
        if ratio is None or abs(ratio - 1.0) <= 1e-3 or ratio <= 0.0:
            return False
        earlier = self.objective_scales[0] if self.objective_scales else None
        if earlier is not None and abs(ratio - earlier) > 1e-4 * abs(ratio):
            return False
        grads_b, grads_a = eb.get("grads") or {}, ea.get("grads") or {}
        if set(grads_b) != set(grads_a) or eb.get("error") or ea.get("error"):
            return False
        for key, grad_b in grads_b.items():
            grad_a = grads_a[key]
            if (grad_b is None) != (grad_a is None):
                return False
            if grad_b is None:
                continue
            expected, actual = _values(grad_b), _values(grad_a)
            if len(expected) != len(actual) or not all(
                abs(a - ratio * e) <= ratio * GRAD_ATOL + GRAD_RTOL * abs(ratio * e)
                for e, a in zip(expected, actual)
            ):
                return False
        self.objective_scales.append(ratio)
        self.rescaled_calls.append(i)
        return True

    def _rescales_the_loss(self, ea: dict[str, Any]) -> bool:
        """Whether the change wrote the statement that scales this call's objective: it
        rebinds the name backpropagated (``loss = loss / accum_steps`` before
        ``loss.backward()``) or rewrote the backward call itself. A factor inside the
        model (``return self.fc(x) * 2``) scales the objective too, but is a forward change."""
        match = _BACKWARD_ROOT.match(str(ea.get("code") or ""))
        if match is not None and match.group(1) in self.rebound:
            return True
        return self._at_changed_line(ea.get("line"))

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
                if same and self._stepped_inputs(earlier, event, set(self._held())):
                    raise _Rejected(
                        f"after's backward call #{i + 1}{_at_line(event.get('line'))} "
                        f"differentiates the value of call #{j + 1} again, though the leaves "
                        "changed in place in between (a stale forward: its gradient is that "
                        "of parameters since stepped)"
                    )

    @staticmethod
    def _stepped_inputs(earlier: dict[str, Any], event: dict[str, Any], held: set[int]) -> bool:
        """Some leaf changed in place between the two calls (its version, or the sum of
        its values, which sees `.data` writes) and the later call's root depends on it
        (a nonzero gradient): a value computed from it before the change. A leaf the
        replay holds is set back after each step (a new version, the same values): only
        its values count."""
        return any(
            _nonzero(grad)
            and _moved(earlier, event, int(k), ("sums",) if int(k) in held else VERSIONS_AND_SUMS)
            for k, grad in (event.get("grads") or {}).items()
        )

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
        self.forward_referenced = True
        self.notes.append(f"{label}: the forward results equal before's with autograd off")

    def _eps_guard(self, eb: dict[str, Any], ea: dict[str, Any], label: str) -> bool:
        """Whether AFTER's forward moved off BEFORE's only by an eps guard: BEFORE's gradient
        at this call is not finite (the guard's reason, ``sqrt(mse + 1e-8)``, ``acos`` of
        a clamped cosine) and every result moved by at most ``EPS_GUARD`` (absolute, and
        relative to the result). The gradients are still judged as usual; the verdict
        says how far the forward moved."""
        if self.broken_at is not None or not _non_finite_gradient(eb):
            return False
        message = str((eb.get("error") or {}).get("message", "")).lower()
        if eb.get("error") and not re.search(r"\b(nan|inf)\b", message):
            return False  # an error no eps repairs (an in-place change, a freed graph)
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
        first_cut = self.broken_at is None and not eb.get("error")
        agreed: list[int] = []
        for k in self._event_keys(eb, ea):
            if self._new_input_leaf(k):
                leaves_a = self.after.get("leaves") or []
                if leaves_a[k].get("in_backward"):
                    self.not_compared.setdefault(
                        k, "made inside a backward call (autograd's own, a checkpoint's input)"
                    )
                    continue
                # no gradient of it in before: the derivative of after's own forward
                grad_a = (ea.get("grads") or {}).get(str(k))
                if k not in self.new_inputs:
                    self.new_inputs.append(k)
                    self.notes.append(
                        f"{self._leaf_name(k)} is an input the change makes require grad, "
                        "not a cut (its gradient is read, or it lets backward reach leaves "
                        "before gave none): compared with after's own finite differences"
                    )
                self._compare_to_fd("after", i, k, grad_a, None, label)
                continue
            self._require_leaf(k, label)
            key = str(k)
            if key not in ea.get("grads", {}) and k in (eb.get("unread") or ()):
                # before asked autograd.grad for it and never read it: no value of it
                # changes anything, and the fix no longer asks
                self.discarded_gradients.append({"event": i, "leaf": k})
                continue
            if key not in ea.get("grads", {}):
                raise _Rejected(
                    f"after: {label} does not compute the gradient of {self._leaf_name(k)}"
                )
            grad_a = ea["grads"][key]
            if eb.get("error"):
                self._mark_broken(i)
                if self._only_through_a_freed_graph(i, eb, k, grad_a):
                    continue
                if self._not_its_loss(i, ea, k, grad_a):
                    continue
                self._compare_to_fd("before", i, k, grad_a, None, label)
                if not _nonzero(grad_a) and k not in self.none_where_flat:
                    self.none_where_flat.append(k)  # agreed with: see _conclude
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
            if i in self.float64_forward:
                self._compare_to_fd("after", i, k, grad_a, None, label)
                continue
            if grad_b is None:
                self._compare_to_fd("before", i, k, grad_a, None, label)
                continue
            if grad_a is None and self._frozen_as_before_meant(ea, k):
                continue
            if self._stops_leak(i, eb, k, grad_b, grad_a):
                continue
            if grad_a is None:
                raise _Rejected(
                    f"after: {label} leaves the gradient of {self._leaf_name(k)} "
                    "None where before computes one"
                )
            if self._compare_to_autograd(i, k, grad_b, grad_a, label) and _nonzero(grad_a):
                agreed.append(k)
        if first_cut and self.broken_at == i:
            self._check_agreed_past_a_cut(i, ea, agreed, label)

    def _check_agreed_past_a_cut(
        self, i: int, ea: dict[str, Any], agreed: list[int], label: str
    ) -> None:
        """Before's call ``i`` is the first with a gradient the change gives anew or
        differently (a cut in before). The leaves whose gradient the change leaves as it
        was may sit behind the same cut (a stop-gradient moved, not removed: the
        generator's gradient still without the adversarial term): a few elements of each
        are checked against finite differences of before's forward too (where the runner
        estimated them: a check no other verdict waits on)."""
        estimated = {
            (entry.get("event"), entry.get("leaf"))
            for entry in ((self.fd or {}).get("before") or {}).get("entries", [])
        }
        for k in agreed[:AGREED_LEAVES_CHECKED]:
            grad_a = (ea.get("grads") or {}).get(str(k))
            n = len(_values(grad_a))
            key = (self._runner_event("before", i), self._runner_leaf("before", k))
            if n and (self.planning or key in estimated):
                elements = sorted({0, n // 2, n - 1})
                self._compare_to_fd("before", i, k, grad_a, elements, label)

    def _only_through_a_freed_graph(self, i: int, eb: dict[str, Any], k: int, grad_a: Any) -> bool:
        """Before's call ``i`` raised "backward through the graph a second time": its
        forward reuses what an earlier call's graph computed (a cache of tensors made from
        an earlier input). A leaf made before the previous call, which no optimizer steps
        (an earlier step's input, not a parameter), reaches that forward only through the
        freed graph; a fix that recomputes instead gives it nothing, on purpose."""
        if BACKWARD_TWICE not in str((eb.get("error") or {}).get("message")) or _nonzero(grad_a):
            return False
        events_b = self.before.get("events") or []
        if i == 0 or k >= len(events_b[i - 1].get("versions") or []):
            return False
        stepped = (_stepped(self.before) or set()) | (_stepped(self.after) or set())
        if k in stepped or k in _read_by_steps(events_b):
            return False
        self.not_compared.setdefault(
            k,
            f"before's backward call #{i + 1} reaches it only through the graph an earlier "
            "backward freed (its error), which the fix no longer reuses",
        )
        return True

    def _stops_leak(self, i: int, eb: dict[str, Any], k: int, grad_b: Any, grad_a: Any) -> bool:
        """Before's call ``i`` was made for other leaves (the ones reset just before it:
        the actor's, zeroed before the actor loss's backward; the runner's ``owns``), yet
        adds a gradient to leaf ``k``'s, which already holds the one of an earlier call
        made for ``k`` (its own loss), and ``k``'s optimizer steps on the sum (the critic
        trained on the actor's loss). After gives ``k`` nothing there: it stops the leak,
        and before's later trajectory, stepped on the leaked gradient, is no reference."""
        owns = eb.get("owns")
        if (
            owns is None
            or k in owns
            or k not in (eb.get("stepped_with") or ())
            or not _nonzero(grad_b)
            or _nonzero(grad_a)
        ):
            return False
        events_b = self.before.get("events") or []
        window = [int(j) for j in (eb.get("read_with") or {}).get(str(k), ())]
        if not any(
            j < i
            and j < len(events_b)
            and k in (events_b[j].get("owns") or ())
            and _nonzero((events_b[j].get("grads") or {}).get(str(k)))
            for j in window
        ):
            return False  # no gradient of k's own loss read with it: nothing leaks into
        self.stopped_leaks.append({"event": i, "leaf": k})
        self._mark_broken(i)
        return True

    def _frozen_as_before_meant(self, ea: dict[str, Any], k: int) -> bool:
        """After's leaf ``k`` does not require grad at this call, frozen by a statement
        before runs too (``self.weight.requires_grad = False``, which before applied to
        a tensor it then replaced): the program's own freeze, now on the leaf it uses."""
        if k not in (ea.get("frozen") or ()):
            return False
        codes_b = {f.get("code") for f in self.before.get("freezes") or () if f.get("code")}
        codes = [
            f["code"]
            for f in self.after.get("freezes") or ()
            if f.get("leaf") == k and f.get("code") in codes_b
        ]
        if codes:
            self.not_compared.setdefault(
                k, f"frozen by `{codes[0]}`, a statement before runs too (its own freeze)"
            )
            return True
        by_change = [f for f in self.before.get("frozen_by_change") or () if f.get("leaf") == k]
        if by_change:
            # a freeze the change writes: before was replayed with the leaf held (see
            # ``verify._frozen_by_the_change``), and the verdict says it proves the rest
            self.not_compared.setdefault(
                k, f"frozen by the change (line {by_change[0].get('line')})"
            )
            return True
        # a freeze before asked for as a module's attribute (which froze nothing), made
        # by after on the module's parameters: the program's freeze, now effective
        kb = self._runner_leaf("before", k)
        asked = [f for f in self.before.get("module_freezes") or () if f.get("leaf") == kb]
        if asked:
            self.not_compared.setdefault(
                k,
                f"frozen as `{asked[0].get('code')}` (line {asked[0].get('line')}) asked "
                "of its module in before, where the attribute froze nothing",
            )
        return bool(asked)

    def _check_restored_accumulation(self, i: int) -> None:
        """Gradient accumulation the change restores: before resets a leaf's gradient
        after backward call ``j`` before anything read it (``zero_grad()`` every
        micro-batch), while after keeps it, and a later call of before made by the same
        statement is read (stepped) instead. Before's optimizer then steps on the last
        micro-batch's gradient alone, a broken gradient from that call on, and its later
        trajectory is no reference (the fix is compared against its own finite
        differences from call ``i``). Gradients of *another* statement that before
        discards (a GAN's discriminator gradients from the generator's loss) are no
        accumulation: a change that steps on them still changes the forward."""
        events_b, events_a = self.before.get("events") or [], self.after.get("events") or []
        for j in range(min(i, len(events_b), len(events_a))):
            eb, ea = events_b[j], events_a[j]
            if not eb.get("code") or eb.get("code") != ea.get("code"):
                continue
            restored = {  # gradients call j gave (not None: a frozen leaf's) reset unread
                k
                for k in set(eb.get("discarded") or ()) - set(ea.get("discarded") or ())
                if _nonzero((eb.get("grads") or {}).get(str(k)))
            }
            for later in range(j + 1, min(i, len(events_b))):
                read = events_b[later]
                if read.get("code") != eb.get("code"):
                    continue
                kept = sorted(k for k in restored if not _discarded(read, k))
                if kept:
                    self._check_accumulates_all(j, later, kept)
                    self._mark_broken(later)
                    self.notes.append(
                        f"before resets the gradient backward call #{j + 1}"
                        f"{_at_line(eb.get('line'))} gives {self._leaf_list(kept)} before "
                        f"anything reads it, and steps on call #{later + 1}'s alone (the same "
                        "statement); after accumulates them: before's trajectory is no "
                        "reference from there on"
                    )
                    return

    def _check_accumulates_all(self, j: int, later: int, kept: list[int]) -> None:
        """After accumulates call ``j``'s gradient of the leaves ``kept`` (restored), so
        it still resetting call ``j``'s gradient of other leaves its optimizer steps, while
        it reads call ``later``'s (the same statement), leaves them stepped on the last
        micro-batch alone: the bug, kept for those leaves."""
        events_a = self.after.get("events") or []
        if later >= len(events_a):
            return
        stepped = _stepped(self.after) or set()
        still = sorted(
            k
            for k in set(events_a[j].get("discarded") or ()) & stepped
            if not _discarded(events_a[later], k)
        )
        if still:
            raise _Rejected(
                f"after accumulates the gradient backward call #{j + 1}"
                f"{_at_line(events_a[j].get('line'))} gives {self._leaf_list(kept)}, but still "
                f"resets the one it gives {self._leaf_list(still)} before anything reads it, "
                f"and steps them on call #{later + 1}'s alone"
            )

    def _check_stepped_objectives(self) -> None:
        """Each optimizer step reads the gradients of some backward statements. Where
        before steps a leaf with the gradients of some statements only and resets the
        gradient another statement gives it unread, and after steps it with that one too
        (a GAN whose discriminator step moved after the generator's backward, so the
        generator's loss trains the discriminator), after trains that leaf on an
        objective before shows it never trains it on."""
        read_b, read_a = _stepped_codes(self.before), _stepped_codes(self.after)
        for k in sorted(read_b):
            # statements whose gradient of k before computed and reset unread: before
            # shows it means them not to train k (a statement that raised shows nothing)
            shown = _discarded_codes(self.before, k)
            extra = sorted(c for c in read_a.get(k, set()) - read_b[k] if c in shown)
            if not extra:
                continue
            calls = [
                event
                for event in self.after.get("events") or ()
                if event.get("code") == extra[0] and k in (event.get("stepped_with") or ())
            ]
            raise _Rejected(
                f"after's optimizer steps {self._leaf_name(k)} with the gradient of "
                f"backward call #{calls[0]['index'] + 1}{_at_line(calls[0].get('line'))} "
                f"(`{extra[0]}`), a loss whose gradient before's steps never apply to it "
                f"(they apply {', '.join(f'`{c}`' for c in sorted(read_b[k]))})"
            )

    def _check_steps_read_nothing(self) -> None:
        """After's optimizer steps read a leaf's gradient only once it was reset (every
        step's window of backward calls is empty), though its backward calls still give
        it a nonzero one, reset unread, and before's steps apply them: after throws each
        gradient away before its step (``zero_grad()`` moved between ``backward()`` and
        ``step()``), and the leaf never trains."""
        windows_b = self.before.get("step_windows") or {}
        for key, steps in sorted((self.after.get("step_windows") or {}).items()):
            k = int(key)
            if not steps or any(steps):
                continue
            kb = self._runner_leaf("before", k)
            if not any(windows_b.get(str(kb)) or ()):
                continue
            thrown = sorted(_discarded_codes(self.after, k))
            if not thrown:
                continue
            call = next(
                event
                for event in self.after.get("events") or ()
                if event.get("code") == thrown[0] and _discarded(event, k)
            )
            applied = sorted(_stepped_codes(self.before).get(kb, set())) or thrown
            raise _Rejected(
                f"after's optimizer steps read the gradient of {self._leaf_name(k)} only "
                f"once it was reset: backward call #{call['index'] + 1}"
                f"{_at_line(call.get('line'))} (`{thrown[0]}`) gives it one that is reset "
                "before any step reads it, at every step, so the leaf never trains "
                f"(before's steps apply {', '.join(f'`{c}`' for c in applied)})"
            )

    def _check_lost_update(self) -> None:
        """Before failed writing a leaf in place after a backward call (``p.add_(-lr,
        p.grad)``, a manual update: "a leaf Variable that requires grad is being used in
        an in-place operation"); after runs on, yet no leaf changes between its backward
        calls (``p = p - lr * p.grad`` rebinds a loop variable): the update the program
        makes is lost, and the model never trains."""
        outcome = self.before.get("outcome") or {}
        if outcome.get("category") != "code" or LEAF_INPLACE not in str(outcome.get("message")):
            return
        if not self.before.get("event_count") or (self.after.get("event_count") or 0) < 2:
            return
        if (self.after.get("outcome") or {}).get("status") != "ok":
            return
        events = self.after.get("events") or []
        if any("sums" not in event for event in events):
            return
        leaves = range(len(events[-1].get("versions") or []))
        if not any(_moved(a, b, k) for a, b in zip(events, events[1:]) for k in leaves):
            raise _Rejected(
                f"before fails writing a leaf in place at line {outcome.get('line')} after a "
                "backward call (an update of the parameters); after changes no leaf between "
                f"its {self.after.get('event_count')} backward calls: the update is lost"
            )

    def _check_lost_accumulation(self) -> None:
        """A change made by hand after which a backward call's gradient of a leaf is reset
        before anything reads it, where before's call made by the same statement gives
        that leaf a gradient its optimizer step reads (accumulated micro-batches): a
        ``zero_grad()`` moved to the top of the loop throws away all but the last
        micro-batch's gradient of each step."""
        if self.intent.declared:
            return
        events_b, events_a = self.before.get("events") or [], self.after.get("events") or []
        applied_a = _stepped_codes(self.after)  # what after's steps do read, by statement
        for i, (eb, ea) in enumerate(zip(events_b, events_a)):
            if eb.get("error") or ea.get("error") or eb.get("code") != ea.get("code"):
                continue
            for key, grad in (ea.get("grads") or {}).items():
                k = int(key)
                if not _discarded(ea, k) or _discarded(eb, k) or not _nonzero(grad):
                    continue
                if not _nonzero((eb.get("grads") or {}).get(key)):
                    continue
                if ea.get("code") not in applied_a.get(k, set()):
                    continue  # a statement after's steps never read (a leak it stops)
                if not any(k in (later.get("stepped_with") or ()) for later in events_b[i:]):
                    continue
                raise _Rejected(
                    f"after resets the gradient backward call #{i + 1}"
                    f"{_at_line(ea.get('line'))} gives {self._leaf_name(k)} before anything "
                    "reads it, where before's optimizer steps read it; after's steps read "
                    f"what the same statement (`{ea.get('code')}`) gives at other calls: "
                    "gradients of micro-batches thrown away, each step sees only part of "
                    "them"
                )

    def _check_dropped_terms(self) -> None:
        """Where every optimizer step of before applies to a leaf the gradient of some
        statement (a discriminator stepped on ``errD_real.backward()``'s and
        ``errD_fake.backward()``'s), and after still computes that gradient but resets it
        before any step reads it (a ``zero_grad()`` moved between the two backward
        calls), after trains the leaf without a term of its objective."""
        core_b = _stepped_by_every_step(self.before)
        applied_a = _stepped_codes(self.after)
        for k, codes in sorted(core_b.items()):
            dropped = sorted(
                code
                for code in codes - applied_a.get(k, set())
                if code in _discarded_codes(self.after, k)
            )
            if not dropped or k not in applied_a:
                continue
            raise _Rejected(
                f"after's optimizer never applies the gradient `{dropped[0]}` gives "
                f"{self._leaf_name(k)} (it resets it before any step reads it), which "
                "every step of before applies to it: a term of the leaf's objective dropped"
            )

    def _check_stale_accumulation(self) -> None:
        """After adds a call's gradient to a ``.grad`` its optimizer already stepped on
        (nothing reset it in between: ``zero_grad()`` dropped), so the next step applies
        the old gradients again, where before's matching call starts from a fresh one."""
        events_b, events_a = self.before.get("events") or [], self.after.get("events") or []
        stepped = _stepped(self.after)
        for m, k, previous in _stale_adds(events_a):
            ea = events_a[m]
            if previous is None or k not in (ea.get("stepped_with") or ()):
                continue  # no earlier call's gradient, or no step reads the sum
            if not _nonzero((ea.get("grads") or {}).get(str(k))):
                continue  # the call adds nothing to it (an all-zero gradient)
            if stepped is not None and k not in stepped:
                continue
            if (
                m < len(events_b)
                and k in (events_b[m].get("accumulated") or ())
                and not self.intent.adds_gradient_reset
            ):
                continue  # before adds to the same kind of gradient there (a change
                # that adds a reset means each step to read fresh ones: not excused)
            raise _Rejected(
                f"after: backward call #{m + 1}{_at_line(ea.get('line'))} adds its "
                f"gradient of {self._leaf_name(k)} to the one the leaf held when it was "
                f"stepped after call #{previous + 1} (nothing reset it in between), so the "
                "next step applies old gradients again"
                + (
                    " (the change adds a gradient reset, yet this step's is stale)"
                    if self.intent.adds_gradient_reset
                    else "; before's call starts from a fresh one"
                )
            )

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
        events = self.after.get("events") or []
        adds = [(m, k) for m, k, _ in _stale_adds(events) if k in self.cleared]
        for m, _ in adds:
            stale = sorted(k for m2, k in adds if m2 == m)
            raise _Rejected(
                f"after: backward call #{m + 1}{_at_line(events[m].get('line'))}"
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
        elements = _spread_elements(numel)
        try:
            entry = self._fd_entry("after", i, k, elements)
        except _Unverifiable as exc:
            self.not_compared[k] = f"no gradient in either version; {exc}"
            return
        if entry is None:
            return  # planned (or missing: the verdict says so)
        for j, (value, _, noise, interval) in sorted(_estimates(entry).items()):
            outside = _off_zero(value, noise, interval)
            if outside is not None and math.isfinite(outside):
                raise _FdRejected(
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

    def _self_check_event(self, i: int, ea: dict[str, Any]) -> None:
        """AFTER's gradients at event i against finite differences of AFTER itself."""
        label = f"backward call #{i + 1}{_at_line(ea.get('line'))}"
        for k in self._event_keys(None, ea):
            if _discarded(ea, k):
                # the fix's program resets it unread: no value of it changes anything
                self.discarded_gradients.append({"event": i, "leaf": k})
                continue
            grad_a = ea["grads"][str(k)]
            if grad_a is None and self._none_at_the_same_statement(ea, k):
                # a stop-gradient both versions keep (``netD(fake.detach())``): finite
                # differences see through it, the program never meant that path
                self.not_compared.setdefault(
                    k,
                    "no gradient at a backward call before makes too, by the same "
                    f"statement (`{ea.get('code')}`), where it has none either",
                )
                continue
            if not _nonzero(grad_a) and self._leak_stopped_by_statement(ea, k):
                self.stopped_leaks.append({"event": i, "leaf": k})
                continue
            if self._not_its_loss(i, ea, k, grad_a):
                continue
            self._compare_to_fd("after", i, k, grad_a, None, label)
        self.self_checked_events += 1

    def _not_its_loss(self, i: int, ea: dict[str, Any], k: int, grad_a: Any) -> bool:
        """After's call ``i`` is made for other leaves (the ones reset just before it: a
        discriminator's loss after its optimizer's ``zero_grad()``) and gives leaf ``k``
        nothing, while another of after's calls, made for ``k``, gives it its gradient
        (the generator's own loss). Where before has no reference (it raised: the
        discriminator's backward reached the generator's freed or stepped graph), the
        path finite differences see from this loss to ``k`` is the one the change stops
        on purpose (``fake.detach()``): not compared."""
        owns = ea.get("owns")
        if owns is None or k in owns or _nonzero(grad_a):
            return False
        if not any(
            k in (event.get("owns") or ()) and _nonzero((event.get("grads") or {}).get(str(k)))
            for event in self.after.get("events") or ()
        ):
            return False
        self.not_compared.setdefault(
            k,
            f"backward call #{i + 1} is made for the leaves reset just before it, and the "
            "change gives this one nothing from it: its gradient comes from a call made "
            "for it",
        )
        return True

    def _leak_stopped_by_statement(self, ea: dict[str, Any], k: int) -> bool:
        """Whether after's call ``ea`` is made by a statement whose leak into leaf ``k``
        after was seen to stop (``_stops_leak``): finite differences see the loss depend
        on ``k``, which the fix means this loss not to train."""
        code, events_b = ea.get("code"), self.before.get("events") or []
        return bool(code) and any(
            entry["leaf"] == k
            and entry["event"] < len(events_b)
            and events_b[entry["event"]].get("code") == code
            for entry in self.stopped_leaks
        )

    def _none_at_the_same_statement(self, ea: dict[str, Any], k: int) -> bool:
        """Whether BEFORE left leaf ``k`` without gradient at a backward call made by the
        same statement as AFTER's call ``ea`` (by its text, whatever the fix's line shift)."""
        code = ea.get("code")
        if not code:
            return False
        return any(
            eb.get("code") == code
            and not eb.get("error")
            and (eb.get("grads") or {}).get(str(k)) is None
            for eb in self.before.get("events") or []
        )

    # ----------------------------------------------------------- references
    def _compare_to_autograd(
        self, i: int, k: int, grad_b: dict[str, Any], grad_a: dict[str, Any], label: str
    ) -> bool:
        """Judge after's gradient against before's; True when they agree everywhere."""
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
            return not undefined
        # Before's autograd gradient is the reference unless finite differences of its
        # forward disprove it (a silent graph cut); its trajectory is then no reference
        # either. Marked now so that the planning run also plans the later calls.
        if self.broken_at is None and i >= 1:
            self.gradient_parted_at = i  # the calls before it agree: perhaps updates only
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
            return False  # decided once the estimates are there
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
        return False

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


def _stepped_by_every_step(trace: dict[str, Any]) -> dict[int, set[str]]:
    """Leaf -> the statements whose nonzero gradient of it every optimizer step that
    steps it reads (the runner's ``step_windows``: the calls each step reads)."""
    events = trace.get("events") or []
    found: dict[int, set[str]] = {}
    for key, steps in (trace.get("step_windows") or {}).items():
        k = int(key)
        common: set[str] | None = None
        for window in steps:
            codes = {
                str(events[j].get("code"))
                for j in window
                if j < len(events)
                and events[j].get("code")
                and not events[j].get("error")
                and _nonzero((events[j].get("grads") or {}).get(str(k)))
            }
            common = codes if common is None else common & codes
        if common:
            found[k] = common
    return found


#: the name a backward statement backpropagates (``loss`` of ``loss.backward()``)
_BACKWARD_ROOT = re.compile(r"\s*([A-Za-z_][\w.]*)\.backward\(")


def _ratio(roots_b: list[Any], roots_a: list[Any], rtol: float) -> float | None:
    """The one constant after's roots are before's times (None: no such constant)."""
    ratio = None
    if not roots_b or len(roots_b) != len(roots_a):
        return None
    for rb, ra in zip(roots_b, roots_a):
        vb, va = _values(rb), _values(ra)
        if len(vb) != len(va) or rb.get("truncated") or ra.get("truncated"):
            return None
        for b, a in zip(vb, va):
            if not (math.isfinite(a) and math.isfinite(b)):
                return None
            if abs(b) <= 1e-12:
                if abs(a) > 1e-12:
                    return None
                continue
            if ratio is None:
                ratio = a / b
            elif abs(a - ratio * b) > rtol * abs(a) + 1e-9:
                return None
    return ratio


def _stale_adds(events: list[dict[str, Any]]) -> Iterator[tuple[int, int, int | None]]:
    """(call, leaf, earlier call): the call adds its gradient to a ``.grad`` holding the
    earlier call's (None: one no recorded call gave), the leaf changed in place (an
    optimizer step) since that call, and a step reads the sum: a gradient already stepped
    on, never reset. Calls that add to a gradient no step has read yet (``errD_real`` then
    ``errD_fake`` before the discriminator's step) are accumulation; a sum a recorded reset
    drops before any step reads it (the generator's loss on the discriminator) trains
    nothing."""
    last: dict[int, int] = {}  # leaf -> the latest call that gave it a gradient
    for m, event in enumerate(events):
        read = event.get("stepped_with")
        for k in event.get("accumulated") or ():
            if read is not None and k not in read:
                continue
            previous = last.get(k)
            if previous is None or _moved(events[previous], event, k, ("versions",)):
                yield m, k, previous
        for key, grad in (event.get("grads") or {}).items():
            if grad is not None:
                last[int(key)] = m


#: what tells a leaf changed in place between two calls: its version counter, and the sum
#: of its values (which sees ``.data`` writes, which move no version counter)
VERSIONS_AND_SUMS = ("versions", "sums")


def _moved(
    earlier: dict[str, Any],
    later: dict[str, Any],
    k: int,
    keys: tuple[str, ...] = VERSIONS_AND_SUMS,
) -> bool:
    """Whether leaf ``k`` changed in place between two recorded calls (by ``keys``)."""
    for key in keys:
        old, new = earlier.get(key) or [], later.get(key) or []
        if k < min(len(old), len(new)) and old[k] != new[k]:
            return True
    return False


def _stepped_codes(trace: dict[str, Any]) -> dict[int, set[str]]:
    """Leaf -> the statements (their text) whose nonzero gradient of it an optimizer step
    reads (the runner's ``stepped_with``)."""
    found: dict[int, set[str]] = {}
    for event in trace.get("events") or ():
        code, grads = event.get("code"), event.get("grads") or {}
        if not code or event.get("error"):
            continue
        for k in event.get("stepped_with") or ():
            grad = grads.get(str(k))
            if _nonzero(grad):
                found.setdefault(int(k), set()).add(code)
    return found


def _discarded_codes(trace: dict[str, Any], k: int) -> set[str]:
    """The statements whose nonzero gradient of leaf ``k`` the program reset unread."""
    found = set()
    for event in trace.get("events") or ():
        grad = (event.get("grads") or {}).get(str(k))
        if event.get("code") and not event.get("error") and _discarded(event, k):
            if _nonzero(grad):
                found.add(event["code"])
    return found
