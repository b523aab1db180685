"""Finite-difference gradients of a script's backward roots (runner subprocess side).

The quantity differentiated at backward event m is its *objective*: the sum over the roots
of ``(root * grad_output).sum()`` (``root.sum()`` when no ``gradient=`` is given), i.e. what
``backward`` back-propagates. For one element j of leaf k the script is re-executed from
scratch with the same seed, and the element is moved by ``±h`` right before the leaf's use
that starts the graph of event m (see :class:`~gradfix.verify.instrument.UseTracker`);
the run stops as soon as event m's roots are known. ``h = 1e-3 * max(1, |value|)`` (1e-2
in half precision), and the step actually applied after rounding to the leaf's dtype is
the one divided by:

* central: ``(f(+h) - f(-h)) / (x(+h) - x(-h))``;
* when one side is not finite (``sqrt`` of a negative number in a masked-out branch), the
  second-order one-sided formula through ``f(0)``, ``f(±h)``, ``f(±2h)`` on the finite
  side, exact for quadratics;
* otherwise the element is *undefined* (nan) and the oracle does not compare it.

A central estimate is also checked for a *kink*: when the right slope
``(f(+h) - f(0)) / h`` and the left slope differ by more than twice the tolerance, they
are measured again at ``h/2``. With smooth curvature the gap halves, and the central
estimates at ``h`` and ``h/2`` are extrapolated (Richardson) to cancel the curvature's
error, checked by a central estimate at ``h/8`` (kinks the longer steps cross can halve
the gap too: when the two disagree, the short step's estimate stands); if it does not (``|x|``
or ``relu`` at 0, ``sqrt`` at 0 behind a ``where``), the derivative does not exist and the
entry carries the interval between the slopes: the oracle accepts any gradient inside it
(a one-dimensional generalised gradient), e.g. the 0 that a guarded ``where`` gives.

A target marked ``precise`` (a possible silent graph cut) also gets float64 estimates
of the elements estimated: the program runs again in double precision with the same
random values, and central differences at ``h`` and ``h/2`` are extrapolated; each
carries its noise bound and its distance from the ``h/2`` estimate (``precise``, or
``precise_error`` saying why there is none).

Each estimate carries a rounding-noise bound ``8 * eps * |f| * sum|weights|`` (eps of the
roots' dtype) that the oracle adds to its absolute tolerance. A leaf with no use before
event m gets an exact zero without any run. At most ``budget`` elements are estimated
(spread evenly over the requested leaves) and no run starts after the time budget.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from typing import Any

from gradfix.verify.oracle import FD_ATOL, FD_RTOL, OWN_FLOAT64

NOISE_FACTOR = 8.0
KINK_GAP = 2.0


def estimate(session: Any, request: dict[str, Any]) -> dict[str, Any]:
    """Answer an ``fd`` request: ``{"targets": [{"event", "leaf", "elements"}], ...}``."""
    started = time.monotonic()
    deadline = started + float(request.get("time_budget", 50.0))
    targets = request.get("targets", [])
    if not targets:
        return {"entries": [], "evaluations": 0, "capped": False}
    last_event = max(int(t["event"]) for t in targets)
    constant = bool(request.get("constant_grads"))
    session.changed_lines = frozenset(int(n) for n in request.get("changed_lines") or ())
    probe, probe_outcome = _run(
        session, stop_after=last_event, perturbation=None, keep=constant, record_steps=True
    )
    estimator = _Estimator(session, probe, deadline)
    entries = [estimator.prepare(t) for t in targets]
    chosen, capped = _allocate(entries, int(request.get("budget", 200)))
    estimator.fill(_interleave(entries, chosen))
    refine = [e for e, t in zip(entries, targets) if t.get("precise") and e.indices]
    if refine:
        _refine(session, probe, refine, deadline)
    return {
        "entries": [e.payload() for e in entries],
        "evaluations": estimator.evaluations,
        "capped": capped or estimator.out_of_time,
        "out_of_time": estimator.out_of_time,
        "probe_outcome": probe_outcome,
        "probe_objectives": {str(m): _encode(v) for m, v in probe.objectives.items()},
        "duration_s": round(time.monotonic() - started, 3),
    }


def _run(
    session: Any,
    *,
    stop_after: int,
    perturbation: Any,
    float64: bool = False,
    keep: bool = False,
    replay: dict[int, Any] | None = None,
    record_steps: bool = False,
    replay_steps: list[Any] | None = None,
    replay_initial: dict[int, Any] | None = None,
    replay_detached: list[Any] | None = None,
    replay_grad_outputs: dict[int, list[Any]] | None = None,
) -> tuple[Any, dict[str, Any]]:
    """One run of the script up to event ``stop_after``; ``float64``: in double precision;
    ``keep``: keep the gradients of ``autograd.grad`` calls without ``create_graph``
    (constants to autograd), ``replay``: give such calls the kept ones back;
    ``record_steps``: keep what each optimizer step leaves its leaves at and each new
    leaf's first value and each ``.detach()`` result, ``replay_steps``/``replay_initial``/
    ``replay_detached``: set them back to those (see ``Recorder.record_steps`` and
    ``Recorder.detach``)."""
    recorder = session.instrument.Recorder(session.path, record_values=False)
    recorder.changed_lines = getattr(session, "changed_lines", frozenset())
    recorder.record_steps = record_steps
    recorder.replay_steps = replay_steps
    recorder.replay_initial = replay_initial
    recorder.replay_detached = replay_detached
    recorder.replay_grad_outputs = replay_grad_outputs
    recorder.stop_after_event = stop_after
    recorder.perturbation = perturbation
    recorder.keep_constant_grads = keep
    recorder.replay_constant_grads = replay
    outcome, _ = session.execute(recorder, track_uses=True, float64=float64)
    return recorder, outcome


#: A program that names float64 itself cannot be widened without changing it.
NAMES_FLOAT64 = re.compile(r"float64|double")
#: How close the float64 run's objective must be to the program's (float32 rounding).
FLOAT64_AGREEMENT = 1e-4


def _refine(session: Any, probe: Any, entries: list[_Entry], deadline: float) -> None:
    """Estimate again the elements of ``entries`` in float64 (the program run in double
    precision with the same random values, see ``instrument.float64_run``), by central
    differences at ``h`` and ``h/2`` extrapolated (Richardson): with float32's rounding
    noise gone, the estimate resolves differences of a few parts in 10^4, such as the
    second-order term ``create_graph=True`` restores. Each estimate carries its noise
    bound and, as its truncation error, its distance from the ``h/2`` estimate."""
    if NAMES_FLOAT64.search(session.source):
        for entry in entries:
            entry.precise_error = OWN_FLOAT64
        return
    last = max(entry.event for entry in entries)
    wide, _ = _run(
        session,
        stop_after=last,
        perturbation=None,
        float64=True,
        keep=probe.keep_constant_grads,
        record_steps=True,
    )
    estimator = _Estimator(session, wide, deadline, float64=True)
    for entry in entries:
        narrow, widened = probe.objectives.get(entry.event), wide.objectives.get(entry.event)
        if not _finite(narrow, widened) or abs(widened - narrow) > FLOAT64_AGREEMENT * (
            1 + abs(narrow)
        ):
            entry.precise_error = (
                f"the float64 run differentiates {widened} at backward #{entry.event}, "
                f"the program {narrow}"
            )
            continue
        use = wide.first_uses.get(entry.event, {}).get(entry.leaf)
        if use is None or entry.leaf >= wide.leaf_counts.get(entry.event, 0):
            entry.precise_error = "the leaf is not used the same way in the float64 run"
            continue
        wide_entry = _Entry({"event": entry.event, "leaf": entry.leaf}, entry.numel, use, None)
        for j, value in zip(entry.indices, entry.values):
            if not math.isfinite(value):
                continue
            if time.monotonic() > deadline:
                return
            found = estimator.extrapolated(wide_entry, j, widened)
            if found is not None:
                entry.precise.append((j, *found))


def _encode(value: float | None) -> float | str | None:
    return None if value is None else (value if math.isfinite(value) else str(value))


class _Entry:
    """Estimates for one (event, leaf) pair."""

    def __init__(
        self, target: dict[str, Any], numel: int, first_use: int | None, error: str | None
    ) -> None:
        self.event = int(target["event"])
        self.leaf = int(target["leaf"])
        self.numel = numel
        requested = target.get("elements")
        self.requested = (
            list(range(numel))
            if requested is None
            else [int(j) for j in requested if 0 <= int(j) < numel]
        )
        self.first_use = first_use
        self.error = error
        #: element -> the gradient the estimate is to judge (see ``_Estimator._central``)
        self.claims = {int(j): float(v) for j, v in (target.get("claims") or {}).items()}
        self.indices: list[int] = []
        self.values: list[float] = []
        self.methods: list[str] = []
        self.noise: list[float] = []
        self.intervals: list[tuple[float, float] | None] = []
        #: float64 estimates (element, value, noise bound, truncation error), see _refine
        self.precise: list[tuple[int, float, float, float]] = []
        self.precise_error: str | None = None

    @property
    def unused(self) -> bool:
        return self.error is None and self.first_use is None

    @property
    def needs_runs(self) -> bool:
        return self.error is None and self.first_use is not None

    def payload(self) -> dict[str, Any]:
        return {
            "event": self.event,
            "leaf": self.leaf,
            "numel": self.numel,
            "requested": len(self.requested),
            "unused": self.unused,
            "error": self.error,
            "indices": self.indices,
            "values": [_encode(v) for v in self.values],
            "methods": self.methods,
            "noise": self.noise,
            "intervals": [None if i is None else list(i) for i in self.intervals],
            **(
                {"precise": [list(p) for p in self.precise], "precise_error": self.precise_error}
                if self.precise or self.precise_error
                else {}
            ),
        }


def _allocate(entries: list[_Entry], budget: int) -> tuple[list[list[int]], bool]:
    """Choose which elements to estimate: round-robin quotas, evenly spaced picks."""
    quotas = [0] * len(entries)
    open_entries = [i for i, e in enumerate(entries) if e.needs_runs and e.requested]
    remaining = budget
    while remaining > 0 and open_entries:
        for i in list(open_entries):
            if remaining == 0:
                break
            quotas[i] += 1
            remaining -= 1
            if quotas[i] == len(entries[i].requested):
                open_entries.remove(i)
    capped = bool(open_entries)
    chosen = []
    for entry, quota in zip(entries, quotas):
        n = len(entry.requested)
        chosen.append([entry.requested[(i * n) // quota] for i in range(quota)] if quota else [])
    return chosen, capped


def _interleave(entries: list[_Entry], chosen: list[list[int]]) -> list[tuple[_Entry, int]]:
    """Round-robin order over the entries, so running out of time spreads the loss."""
    work: list[tuple[_Entry, int]] = []
    for rank in range(max((len(c) for c in chosen), default=0)):
        work.extend(
            (entry, elements[rank])
            for entry, elements in zip(entries, chosen)
            if rank < len(elements) and not entry.unused
        )
    return work


class _Estimator:
    def __init__(self, session: Any, probe: Any, deadline: float, float64: bool = False) -> None:
        self.session = session
        self.probe = probe
        self.deadline = deadline
        self.float64 = float64
        self.evaluations = 0
        self.out_of_time = False

    def prepare(self, target: dict[str, Any]) -> _Entry:
        m, k = int(target["event"]), int(target["leaf"])
        numel = self.probe.leaves[k].numel() if k < len(self.probe.leaves) else 0
        if m not in self.probe.objectives:
            return _Entry(target, numel, None, f"the probe run did not reach backward #{m}")
        if k >= self.probe.leaf_counts.get(m, 0):
            return _Entry(target, numel, None, f"leaf {k} did not exist at backward #{m}")
        return _Entry(target, numel, self.probe.first_uses[m].get(k), None)

    def fill(self, work: list[tuple[_Entry, int]]) -> None:
        """Estimate each (entry, element) in turn until done or out of time."""
        for entry, j in work:
            if time.monotonic() > self.deadline:
                self.out_of_time = True
                return
            estimate = self._element(entry, j)
            entry.indices.append(j)
            entry.values.append(estimate.value)
            entry.methods.append(estimate.method)
            entry.noise.append(estimate.noise)
            entry.intervals.append(estimate.interval)

    def _objective(self, entry: _Entry, element: int, multiple: float) -> tuple[float, float]:
        """Objective of event m with the element moved by ``multiple * h``, and the step."""
        perturbation = self.session.instrument.Perturbation(
            leaf=entry.leaf, use=entry.first_use, element=element, multiple=multiple
        )
        self.evaluations += 1
        replay = self.probe.constant_grads if self.probe.keep_constant_grads else None
        recorder, _ = _run(
            self.session,
            stop_after=entry.event,
            perturbation=perturbation,
            float64=self.float64,
            replay=replay,
            replay_steps=self.probe.step_values,
            replay_initial=self.probe.initial_values,
            replay_detached=self.probe.detached,
            replay_grad_outputs=self.probe.kept_grad_outputs,
        )
        value = recorder.objectives.get(entry.event)
        if value is None or perturbation.step is None or perturbation.step == 0.0:
            return math.nan, math.nan
        return value, perturbation.step

    def extrapolated(self, entry: _Entry, j: int, f0: float) -> tuple[float, float, float] | None:
        """(estimate, noise bound, truncation error) of Richardson's extrapolation of the
        central differences at ``h`` and ``h/2``; None where a side is not finite."""
        steps = [self._objective(entry, j, m) for m in (1, -1, 0.5, -0.5)]
        if not _finite(*(v for step in steps for v in step)):
            return None
        (f1, x1), (f2, x2), (f3, x3), (f4, x4) = steps
        eps = self.probe.root_eps.get(entry.event, 2.2e-16)
        noise = NOISE_FACTOR * eps * max(abs(f0), abs(f1), abs(f2)) * 2 / (x1 - x2)
        full = _Estimate((f1 - f2) / (x1 - x2), "central", noise)
        refined = _extrapolated(full, x1 - x2, (f3, x3), (f4, x4))
        half = (f3 - f4) / (x3 - x4)
        return refined.value, refined.noise, abs(refined.value - half)

    def _element(self, entry: _Entry, j: int) -> _Estimate:
        f0 = self.probe.objectives.get(entry.event)
        eps = self.probe.root_eps.get(entry.event, 1.2e-7)
        plus = self._objective(entry, j, +1)
        minus = self._objective(entry, j, -1)
        if _finite(*plus, *minus):
            return self._central(entry, j, f0, eps, plus, minus)
        return self._one_sided(entry, j, f0, eps, plus if _finite(*plus) else minus)

    def _central(
        self,
        entry: _Entry,
        j: int,
        f0: float | None,
        eps: float,
        plus: tuple[float, float],
        minus: tuple[float, float],
    ) -> _Estimate:
        """The central estimate at ``h``, kept only where it converged: the estimate at
        ``h/2`` agrees with it (or, under strong curvature, the one at ``h/4`` agrees with
        the one at ``h/2``). A quotient across a discontinuity (a ``where`` whose branch
        switches inside the step, a pole) is no derivative: it grows as the step shrinks,
        and the element is left out (``discontinuous`` / ``unconverged``, value nan)."""
        (f_plus, x_plus), (f_minus, x_minus) = plus, minus
        width = x_plus - x_minus
        noise = NOISE_FACTOR * eps * max(abs(f_plus), abs(f_minus)) * 2 / width
        estimate = _Estimate((f_plus - f_minus) / width, "central", noise)
        claim = entry.claims.get(j)
        if claim is not None and _agree(estimate.value, claim, noise):
            # the quotient already agrees with the gradient it judges: a quotient across a
            # discontinuity (which grows as 1/h) does so only by chance
            return estimate
        half_plus, half_minus = self._objective(entry, j, 0.5), self._objective(entry, j, -0.5)
        if not _finite(*half_plus, *half_minus) or half_plus[1] == half_minus[1]:
            return estimate
        half = (half_plus[0] - half_minus[0]) / (half_plus[1] - half_minus[1])
        if _jumps(f_plus - f_minus, half_plus[0] - half_minus[0], estimate.value, half, noise):
            return _Estimate(math.nan, "discontinuous", noise)
        if f0 is None or not math.isfinite(f0):
            return self._converged(entry, j, eps, estimate, width, half_plus, half_minus)
        gap, low, high = _one_sided_gap(f0, plus, minus)
        one_sided_noise = (
            NOISE_FACTOR * eps * max(abs(f0), abs(f_plus), abs(f_minus)) * 2 / min(x_plus, -x_minus)
        )
        if gap <= KINK_GAP * (FD_ATOL + FD_RTOL * max(abs(low), abs(high)) + one_sided_noise):
            return self._converged(entry, j, eps, estimate, width, half_plus, half_minus)
        # The slopes on either side disagree: a kink, or strong curvature. With curvature
        # the gap halves with the step; at a kink it stays (or grows, as for sqrt at 0).
        half_gap, half_low, half_high = _one_sided_gap(f0, half_plus, half_minus)
        if half_gap < 0.75 * gap:
            extrapolated = _extrapolated(estimate, width, half_plus, half_minus)
            return self._confirmed(entry, j, eps, extrapolated)
        return _Estimate(estimate.value, "kink", noise, (min(low, half_low), max(high, half_high)))

    def _converged(
        self,
        entry: _Entry,
        j: int,
        eps: float,
        estimate: _Estimate,
        width: float,
        half_plus: tuple[float, float],
        half_minus: tuple[float, float],
    ) -> _Estimate:
        """``estimate`` when the central estimate at ``h/2`` agrees with it; else the
        extrapolation once the estimates at ``h/2`` and ``h/4`` agree (curvature shrinks
        the error fourfold per halving); else ``unconverged``."""
        half_width = half_plus[1] - half_minus[1]
        half = (half_plus[0] - half_minus[0]) / half_width
        half_noise = (
            NOISE_FACTOR * eps * max(abs(half_plus[0]), abs(half_minus[0])) * 2 / (half_width)
        )
        if _agree(estimate.value, half, estimate.noise + half_noise):
            return estimate
        quarter_plus = self._objective(entry, j, 0.25)
        quarter_minus = self._objective(entry, j, -0.25)
        if not _finite(*quarter_plus, *quarter_minus) or quarter_plus[1] == quarter_minus[1]:
            return _Estimate(math.nan, "unconverged", estimate.noise)
        quarter_width = quarter_plus[1] - quarter_minus[1]
        quarter = (quarter_plus[0] - quarter_minus[0]) / quarter_width
        quarter_noise = (
            NOISE_FACTOR
            * eps
            * max(abs(quarter_plus[0]), abs(quarter_minus[0]))
            * (2 / quarter_width)
        )
        shrinking = abs(half - quarter) < 0.5 * abs(estimate.value - half)
        if shrinking and _agree(half, quarter, half_noise + quarter_noise):
            halved = _Estimate(half, "central", half_noise)
            return _extrapolated(halved, half_width, quarter_plus, quarter_minus)
        return _Estimate(math.nan, "unconverged", estimate.noise)

    def _confirmed(self, entry: _Entry, j: int, eps: float, extrapolated: _Estimate) -> _Estimate:
        """The extrapolation assumes smooth curvature between the steps; a step an eighth
        as long checks it. Kinks the steps cross (a relu of many elements near 0: the gap
        of the slopes may halve with the step by chance) make the two disagree; the short
        step, past those kinks, is then the estimate."""
        plus, minus = self._objective(entry, j, 0.125), self._objective(entry, j, -0.125)
        if not _finite(*plus, *minus) or plus[1] == minus[1]:
            return extrapolated
        width = plus[1] - minus[1]
        noise = NOISE_FACTOR * eps * max(abs(plus[0]), abs(minus[0])) * 2 / width
        short = (plus[0] - minus[0]) / width
        tolerance = FD_ATOL + FD_RTOL * abs(extrapolated.value) + noise + extrapolated.noise
        if abs(short - extrapolated.value) <= tolerance:
            return extrapolated
        return _Estimate(short, "central", noise)

    def _one_sided(
        self, entry: _Entry, j: int, f0: float | None, eps: float, near: tuple[float, float]
    ) -> _Estimate:
        """Second-order one-sided difference through 0, x1 and x2 = 2 x1 (on the finite
        side), exact for quadratics."""
        f1, x1 = near
        if f0 is None or not _finite(f0, f1, x1):
            return _Estimate(math.nan, "undefined")
        f2, x2 = self._objective(entry, j, 2 if x1 > 0 else -2)
        if not _finite(f2, x2) or x2 == x1:
            return _Estimate(math.nan, "undefined")
        weights = (-(x1 + x2) / (x1 * x2), -x2 / (x1 * (x1 - x2)), -x1 / (x2 * (x2 - x1)))
        value = weights[0] * f0 + weights[1] * f1 + weights[2] * f2
        scale = max(abs(f0), abs(f1), abs(f2))
        noise = NOISE_FACTOR * eps * scale * sum(abs(w) for w in weights)
        return _Estimate(value, "one-sided+" if x1 > 0 else "one-sided-", noise)


@dataclass
class _Estimate:
    value: float
    method: str
    noise: float = 0.0
    interval: tuple[float, float] | None = None  # [left, right] slopes at a kink


def _extrapolated(
    estimate: _Estimate,
    width: float,
    half_plus: tuple[float, float],
    half_minus: tuple[float, float],
) -> _Estimate:
    """Richardson's extrapolation of the central estimates at ``h`` and ``h/2``: their
    error is ``c * width**2`` under smooth curvature, so ``(D2 w1^2 - D1 w2^2) / (w1^2 -
    w2^2)`` cancels it (a tanh near saturation bends enough to move ``D1`` by 10 %)."""
    half_width = half_plus[1] - half_minus[1]
    if not half_width or abs(half_width) >= abs(width):
        return estimate
    half = (half_plus[0] - half_minus[0]) / half_width
    w1, w2 = width * width, half_width * half_width
    value = (half * w1 - estimate.value * w2) / (w1 - w2)
    # the half step's rounding noise is twice as large, and the weights add up to ~5/3
    noise = estimate.noise * 2 * (w1 + w2) / (w1 - w2)
    return _Estimate(value, "central", noise)


def _one_sided_gap(
    f0: float, plus: tuple[float, float], minus: tuple[float, float]
) -> tuple[float, float, float]:
    """|right slope - left slope| and the two slopes in increasing order."""
    right = (plus[0] - f0) / plus[1]
    left = (f0 - minus[0]) / -minus[1]
    return abs(right - left), min(left, right), max(left, right)


def _agree(a: float, b: float, noise: float) -> bool:
    """Two estimates of one derivative agree within the finite-difference tolerance."""
    return abs(a - b) <= FD_ATOL + FD_RTOL * max(abs(a), abs(b)) + noise


def _jumps(delta: float, half_delta: float, estimate: float, half: float, noise: float) -> bool:
    """The difference ``f(+h) - f(-h)`` does not shrink with the step (a jump: it stays;
    a pole: it grows), while the quotients disagree: no derivative exists there. Smooth
    functions and kinks halve it, ``sqrt`` at 0 shrinks it by sqrt(2)."""
    if _agree(estimate, half, 3 * noise):
        return False
    return abs(half_delta) > 0.85 * abs(delta)


def _finite(*values: float | None) -> bool:
    return all(v is not None and math.isfinite(v) for v in values)
