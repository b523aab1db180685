"""Finite differences as a reference: judging a gradient against the runner's estimates
(:mod:`gradfix.verify.finite_diff` computes them), and before's autograd against them."""

from __future__ import annotations

import math
from typing import Any

from gradfix.verify.oracle.common import (
    CONFIRMED_AT_MOST,
    FD_ATOL,
    FD_RTOL,
    FLOAT32_GRADIENT,
    NO_DERIVATIVE,
    OWN_FLOAT64,
    PRECISE_ATOL,
    PRECISE_RTOL,
    _estimate_text,
    _estimates,
    _fd_bounds,
    _FdRejected,
    _flat,
    _float64_estimates,
    _format,
    _GradientChange,
    _nonzero,
    _Unverifiable,
    _values,
)
from gradfix.verify.oracle.structure import _Structure


class _FiniteDifferences(_Structure):
    """Judges a gradient against finite differences of a forward, and before's autograd
    gradient against them where after's differs (a silent graph cut)."""

    to_confirm: str | None
    stop_gradient_intent: str

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
        if not _nonzero(grad_a) and i < len(events) and k in (events[i].get("frozen") or []):
            # ``E.requires_grad = False`` before the call: no gradient is expected (None,
            # or a zero increment of a ``.grad`` an earlier call left)
            self.not_compared.setdefault(k, "frozen (requires_grad is False at the call)")
            return
        if grad_a is None and self._rewrapped(k):
            return
        if not _nonzero(grad_a) and self._aliases_a_cut_value(k):
            return
        self._require_finite(grad_a, k, label)
        claims = _values(grad_a) if grad_a is not None else None
        entry = self._fd_entry(source, i, k, elements, claims=claims)
        if entry is None:
            return
        self.leaves_compared.add(k)
        self._check_fd_entry(source, i, k, grad_a, entry, elements, label)

    def _aliases_a_cut_value(self, k: int) -> bool:
        """After's leaf ``k`` is a graph value detached and made a leaf (``out[:, i:j]
        .detach().requires_grad_()``, a chunked loss's input): it shares that value's
        storage, so perturbing it perturbs the value too, a path autograd rightly does not
        have. Where a call gives it nothing, finite differences cannot say otherwise."""
        leaves = self.after.get("leaves") or []
        if k >= len(leaves) or not leaves[k].get("from_cut"):
            return False
        self.not_compared.setdefault(
            k,
            "made of a detached graph value, whose storage it shares: perturbing it "
            "perturbs that value too (no gradient from this call to compare)",
        )
        return True

    def _rewrapped(self, k: int) -> bool:
        """After's leaf ``k`` was replaced by a later leaf over its storage (``m.bias =
        nn.Parameter(b.view(-1))``): perturbing it perturbs that leaf, so finite
        differences see a path autograd rightly does not (no gradient is meant)."""
        leaves = self.after.get("leaves") or []
        later = leaves[k].get("rewrapped_as") if k < len(leaves) else None
        if later is None:
            return False
        self.not_compared.setdefault(
            k, f"replaced by leaf {later}, a parameter made over its storage"
        )
        return True

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
                raise _FdRejected(disagreement, flat=_flat(estimate))
            event, entry = confirmed_in
            event = self._runner_event(source, event)
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
            raise _FdRejected(f"{disagreement}; in float64 it is {_format(wide)}", flat=_flat(wide))
        why = entry.get("precise_error")
        if why == OWN_FLOAT64:
            raise _FdRejected(disagreement, flat=_flat(estimate))  # float64 already
        if why or self.confirmed:
            raise _Unverifiable(
                f"{disagreement}, but float32's quotients are not trusted alone and "
                f"float64 could not confirm it ({why or 'no estimate'})"
            )
        # every disagreement of the comparison is asked for in one round (at most
        # CONFIRMED_AT_MOST elements): one asked at a time leaves the next without an
        # estimate once the first is confirmed
        leaf = self._runner_leaf(source, k)
        target = next(
            (
                t
                for t in self.confirm
                if (t["source"], t["event"], t["leaf"]) == (source, event, leaf)
            ),
            None,
        )
        if sum(len(t["elements"]) for t in self.confirm) >= CONFIRMED_AT_MOST:
            pass  # enough to decide: the rest stay unconfirmed
        elif target is None:
            self.confirm.append(
                {"source": source, "event": event, "leaf": leaf, "elements": [j], "precise": True}
            )
        elif j not in target["elements"]:
            target["elements"].append(j)
        if self.to_confirm is None:
            self.to_confirm = disagreement  # unverified at the end, unless rejected first

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
            raise _FdRejected(
                f"gradient wrong: {label} gives {self._leaf_name(k)} the "
                f"gradient {got} at element {j}, where {whose} has a kink with "
                f"slopes {_format(low)} and {_format(high)} on either side"
            )
        self.kink_checks += 1
        self.values_checked.add(k)

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
        leaf, event = self._runner_leaf(source, k), self._runner_event(source, i)
        target: dict[str, Any] = {"event": event, "leaf": leaf, "elements": elements}
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
            if entry.get("event") == event and entry.get("leaf") == leaf:
                error = entry.get("error")
                if error and "did not exist" in error:
                    raise _FdRejected(
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
        probe = result.get("probe_objectives", {}).get(str(self._runner_event(source, i)))
        if i >= len(events) or probe is None or events[i].get("objective") is None:
            return
        recorded, replayed = float(events[i]["objective"]), float(probe)
        if math.isfinite(recorded) and not abs(recorded - replayed) <= 1e-6 * (1 + abs(recorded)):
            raise _Unverifiable(
                f"{source} is not deterministic under a fixed seed: backward "
                f"call #{i + 1} differentiates {_format(recorded)} in one run "
                f"and {_format(replayed)} in another"
            )

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
            raise _FdRejected(
                f"{changed.message(j)}; no finite-difference estimate of "
                "before's forward was computed there to check it"
            )
        value, method, noise, interval = estimate
        if method in NO_DERIVATIVE:
            # a quotient across a discontinuity is no derivative: nothing to judge by
            self.fd_details["left_out"].append({"source": "before", "element": j, "method": method})
            return None
        if not math.isfinite(value):
            raise _FdRejected(
                f"{changed.message(j)}; the finite-difference derivative of "
                "before's forward is undefined there"
            )
        low, high = _fd_bounds(value, noise, interval)
        before, after = changed.before[j], changed.after[j]
        shown = _estimate_text(value, interval)
        if low <= before <= high and interval is not None and low <= after <= high:
            # at a kink both gradients lie between its one-sided slopes: nothing decides
            self.fd_details["left_out"].append({"source": "before", "element": j, "method": "kink"})
            return None
        if low <= before <= high:
            if interval is None and low <= after <= high:
                # float32's estimate cannot tell them apart: the float64 one decides
                refined = self._judge_precisely(j, changed, entry)
                if refined is not None:
                    return refined
                if entry.get("precise_error") != OWN_FLOAT64:
                    # no float64 estimate of this element: nothing tells the two apart
                    self.fd_details["left_out"].append(
                        {"source": "before", "element": j, "method": "undecided"}
                    )
                    return None
            agreement = (
                f"{changed.message(j)}; the finite-difference derivative of "
                f"before's forward agrees with before's autograd: {shown}"
                + self._precise_missing(entry)
            )
            self._stopped_on_purpose(agreement)
            raise _FdRejected(agreement, flat=_flat(value))
        if not low <= after <= high and interval is None:
            # float32's quotient says after is wrong: float64 decides where it can
            refined = self._judge_precisely(j, changed, entry)
            if refined is not None:
                return refined
        if not low <= after <= high:
            raise _FdRejected(
                f"gradient wrong: {changed.label} gives {changed.leaf} the "
                f"gradient {_format(after)} at element {j}, the finite-difference "
                f"derivative of before's forward is {shown} (before's autograd "
                f"gives {_format(before)}; rtol {FD_RTOL}, atol "
                f"{_format(FD_ATOL + noise)})",
                flat=_flat(value),
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

    def _stopped_on_purpose(self, agreement: str) -> None:
        """Before's gradient is the true derivative of its forward and after's is not: no
        evidence against a change that adds a stop-gradient, which means exactly that (a
        TD target, a GAN's fake or an old policy held constant); whether the gradient
        should stop there is intent the run cannot show: unverified, saying so."""
        added = self.intent.adds_stop_gradient
        if added:
            self.stop_gradient_intent = added
            raise _Unverifiable(
                f"{agreement}; the change adds a stop-gradient ({added}), which makes the "
                "gradient differ from the derivative of the forward on purpose or by "
                "mistake: the run cannot tell which; check that no gradient should flow "
                "there (a target, a frozen reference), or state the objective in a test"
            )

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
            agreement = (
                f"{changed.message(j)}; the float64 finite-difference derivative of "
                f"before's forward agrees with before's autograd: {_format(value)}"
            )
            self._stopped_on_purpose(agreement)
            raise _FdRejected(agreement, flat=_flat(value))
        if abs(after - value) > tolerance:
            raise _FdRejected(
                f"gradient wrong: {changed.label} gives {changed.leaf} the gradient "
                f"{_format(after)} at element {j}, the float64 finite-difference "
                f"derivative of before's forward is {_format(value)} (before's autograd "
                f"gives {_format(before)}; rtol {PRECISE_RTOL}, atol {_format(tolerance)})",
                flat=_flat(value),
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
