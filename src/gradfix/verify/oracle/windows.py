"""Windows: what each leaf's ``.grad`` accumulates between its resets, for a change that
regroups the backward calls (two losses each backpropagated, fixed as one backward of
their sum; a second backward through a freed graph dropped or kept with
``retain_graph=True``). The calls no longer line up one to one, but what an optimizer
step or the program reads does: the sum over the calls of each window."""

from __future__ import annotations

import math
from typing import Any

from gradfix.verify.oracle.common import (
    FD_ATOL,
    FD_RTOL,
    GRAD_ATOL,
    GRAD_RTOL,
    NO_DERIVATIVE,
    _format,
    _nonzero,
    _Rejected,
    _Unverifiable,
    _values,
)
from gradfix.verify.oracle.references import _References


def _windows(trace: dict[str, Any], k: int) -> list[list[int]]:
    """The backward calls whose gradient of leaf ``k`` each of its windows sums: a call
    that adds to no gradient the leaf already holds (its ``.grad`` was reset or never
    set) opens a window. A call that raised counts where it would have added."""
    windows: list[list[int]] = []
    for i, event in enumerate(trace.get("events") or []):
        grad = (event.get("grads") or {}).get(str(k))
        gives = _nonzero(grad)
        if not gives and not event.get("error"):
            continue
        if not windows or k not in (event.get("accumulated") or ()):
            windows.append([])
        windows[-1].append(i)
    return windows


class _Windows(_References):
    """Compares, per leaf, the gradient each window accumulates (see the module)."""

    def _regrouped(self) -> bool:
        """Whether a comparison by windows applies: a change of unknown intent whose runs
        make different numbers of backward calls over the same leaves, all recorded."""
        if self.intent.declared:
            return False
        nb, na = self.before.get("event_count", 0), self.after.get("event_count", 0)
        if nb == na or not nb or not na:
            return False
        if self.before.get("events_truncated") or self.after.get("events_truncated"):
            return False
        if self.after["outcome"].get("status") == "error":
            return False
        leaves_b, leaves_a = self.before.get("leaves") or [], self.after.get("leaves") or []
        return len(leaves_b) == len(leaves_a) and all(
            lb.get("shape") == la.get("shape") for lb, la in zip(leaves_b, leaves_a)
        )

    def _compare_windows(self) -> str:
        """The reason of a verified verdict, or raises: a window whose sums differ
        (rejected), or one the runs cannot decide (unverified)."""
        events_b, events_a = self.before.get("events") or [], self.after.get("events") or []
        if any(event.get("error") for event in events_a):
            raise _Unverifiable("after's backward calls raise")
        compared = 0
        used_fd = False
        for k in range(len(self.after.get("leaves") or [])):
            windows_b, windows_a = _windows(self.before, k), _windows(self.after, k)
            if len(windows_b) != len(windows_a):
                raise _Unverifiable(
                    f"{self._leaf_name(k)} accumulates its gradient over {len(windows_b)} "
                    f"window(s) between resets in before, {len(windows_a)} in after: the "
                    "backward calls are regrouped and the windows do not line up either"
                )
            for calls_b, calls_a in zip(windows_b, windows_a):
                expected, approximate = self._window_sum(events_b, calls_b, k)
                if expected is None:
                    continue  # finite differences still to come (planning)
                used_fd = used_fd or approximate
                actual = self._summed(events_a, calls_a, k)
                self._check_window(k, calls_b, calls_a, expected, actual, approximate)
                compared += 1
        if self.planning or any(self.needs.values()):
            raise _Unverifiable("finite differences are needed for the windows")
        if not compared:
            raise _Unverifiable("no window of gradients to compare")
        nb, na = self.before.get("event_count", 0), self.after.get("event_count", 0)
        self.notes.append(f"the change regroups the backward calls (before makes {nb}, after {na})")
        raised = [e["index"] + 1 for e in events_b if e.get("error")]
        tail = (
            f"; before's call(s) #{', #'.join(map(str, raised))} raised: their part is the "
            "finite-difference derivative of before's forward there"
            if raised
            else ""
        )
        return (
            f"the change regroups the backward calls (before makes {nb}, after {na}): the "
            f"gradient every leaf accumulates between its resets matches over {compared} "
            f"window(s){tail}" + (" (within the finite-difference tolerance)" if used_fd else "")
        )

    def _window_sum(
        self, events: list[dict[str, Any]], calls: list[int], k: int
    ) -> tuple[dict[int, float] | None, bool]:
        """Element -> before's accumulated gradient over ``calls`` (a raised call's part
        by finite differences of before's forward; only their estimated elements), and
        whether finite differences are in it. None while an estimate is still needed."""
        parts: list[dict[int, float]] = []
        estimated: list[set[int]] = []
        for i in calls:
            event = events[i]
            if event.get("error"):
                entry = self._fd_entry("before", i, k, None)
                if entry is None:
                    return None, True
                part = {
                    int(j): float(v)
                    for j, v, method in zip(entry["indices"], entry["values"], entry["methods"])
                    if method not in NO_DERIVATIVE and math.isfinite(float(v))
                }
                estimated.append(set(part))
            else:
                grad = (event.get("grads") or {}).get(str(k))
                part = dict(enumerate(_values(grad))) if grad is not None else {}
            parts.append(part)
        # where finite differences estimated only some elements, only those are summed
        keys = set.intersection(*estimated) if estimated else set().union(*parts)
        total = {j: sum(part.get(j, 0.0) for part in parts) for j in sorted(keys)}
        return total, bool(estimated)

    @staticmethod
    def _summed(events: list[dict[str, Any]], calls: list[int], k: int) -> dict[int, float]:
        total: dict[int, float] = {}
        for i in calls:
            grad = (events[i].get("grads") or {}).get(str(k))
            for j, v in enumerate(_values(grad) if grad is not None else []):
                total[j] = total.get(j, 0.0) + float(v)
        return total

    def _check_window(
        self,
        k: int,
        calls_b: list[int],
        calls_a: list[int],
        expected: dict[int, float],
        actual: dict[int, float],
        approximate: bool,
    ) -> None:
        rtol, atol = (FD_RTOL, FD_ATOL) if approximate else (GRAD_RTOL, GRAD_ATOL)
        for j, e in sorted(expected.items()):
            a = actual.get(j, 0.0)
            if not math.isfinite(a):
                raise _Rejected(
                    f"after: the gradient {self._leaf_name(k)} accumulates over backward "
                    f"call(s) {_calls(calls_a)} is not finite at element {j}"
                )
            if abs(a - e) > atol + rtol * abs(e):
                raise _Rejected(
                    f"gradient accumulated wrong: {self._leaf_name(k)} accumulates "
                    f"{_format(a)} at element {j} over after's backward call(s) "
                    f"{_calls(calls_a)}, {_format(e)} over before's {_calls(calls_b)}"
                    f"{' (a raised call by finite differences)' if approximate else ''} "
                    f"(rtol {rtol:g}, atol {atol:g})"
                )
            (self.finite if approximate else self.gradient).add(a, e)


def _calls(calls: list[int]) -> str:
    return ", ".join(f"#{i + 1}" for i in calls)
