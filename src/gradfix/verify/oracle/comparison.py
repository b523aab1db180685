"""The verdict: one comparison run end to end, its conclusion and its evidence."""

from __future__ import annotations

import copy
from typing import Any

from gradfix.verify.oracle.common import (
    MAKE_VERIFIABLE,
    TOLERANCES,
    Verdict,
    _estimates,
    _FdRejected,
    _flat,
    _format,
    _off_zero,
    _outcome_text,
    _read_by_steps,
    _Rejected,
    _short_outcome,
    _spread_elements,
    _Stats,
    _Unverifiable,
    moved_while_frozen,
)
from gradfix.verify.oracle.windows import _Windows


class _Comparison(_Windows):
    """Runs the checks in order and concludes: the verdict, its reason and evidence."""

    # ------------------------------------------------------------- driver
    def run(self) -> Verdict:
        try:
            self._check_nonleaf_grad_reads()
            self._check_untrained_new_leaves()
            self._check_unfrozen_untrained()
            self._check_untrained_siblings()
            self._check_runs()
            try:
                self._check_counts()
            except _Unverifiable:
                # leaves or calls that do not line up leave the gradients undecided; in a
                # program without backward a module-level value the change altered is
                # positive evidence all the same (a folded bias dropped)
                if not self.before.get("event_count") and not self.after.get("event_count"):
                    self._compare_globals()
                if self._regrouped():  # what each leaf's gradient accumulates still lines up
                    return Verdict("verified", self._compare_windows(), self.evidence())
                raise
            self._check_forward_reference()
            self._check_stale_accumulation()
            self._check_stepped_objectives()
            self._check_steps_read_nothing()
            self._check_dropped_terms()
            self._check_lost_accumulation()
            self._check_lost_update()
            self._check_stale_roots()
            for i in range(len(self.after.get("events", []))):
                self._compare_event(i)
            if self.stale_at is not None:
                self._check_fix_clears()
            self._compare_globals()
            if self.to_confirm is not None:
                raise _Unverifiable(f"{self.to_confirm}; to be confirmed in float64")
            if self.blocked is not None:
                raise _Unverifiable(self._blocked_reason(self.blocked))
        except _FdRejected as exc:
            custom = self._custom_gradients()
            introduced = self._custom_gradients_introduced()
            if introduced:
                return Verdict(
                    "unverified",
                    f"{self._held_prefix()}{exc}; but the change makes gradients of its own "
                    f"({', '.join(introduced[:3])}, which before does not have): they are "
                    "what it declares, no derivative of the forward, so finite differences "
                    "are no evidence for or against them",
                    self.evidence(),
                )
            if not custom or not exc.flat:
                return Verdict("rejected", self._held_prefix() + str(exc), self.evidence())
            return Verdict(
                "unverified",
                f"{self._held_prefix()}{exc}; but the program makes gradients of its own "
                f"({', '.join(custom[:3])}): where its forward is flat, they are no derivative of "
                "it, so finite differences are no evidence against them",
                self.evidence(),
            )
        except _Rejected as exc:
            independent = self._held_independent_in_before(str(exc))
            if independent == "":  # planning its finite differences: no verdict yet
                return Verdict("unverified", str(exc), self.evidence())
            if independent:
                return Verdict(
                    "unverified",
                    f"{self._held_prefix()}{exc}; but before's forward does not depend on "
                    f"{independent} (finite-difference derivative 0 at each element "
                    "estimated), which the change makes train: to give it a gradient the "
                    "change must change what the forward computes (a new objective, such as "
                    "a soft mask for a hard one), which the run cannot judge",
                    self.evidence(),
                )
            return Verdict("rejected", self._held_prefix() + str(exc), self.evidence())
        except _Unverifiable as exc:
            return Verdict("unverified", self._held_prefix() + str(exc), self.evidence())
        verdict = self._conclude()
        if verdict.verified and self.identical:
            verdict.reason = f"{self._no_difference()}; {verdict.reason}"
            untrained = self._never_stepped()
            if untrained:
                # the run shows a training bug the change leaves as it was: no proof of a
                # fix, though nothing shows the change is wrong either
                return Verdict(
                    "unverified",
                    self._no_difference(
                        f"in both, {self._leaf_list(untrained)} get a gradient that no "
                        "optimizer step reads while the steps read other leaves': if the "
                        "change means to train them, it does not (left out of the "
                        "optimizer's groups, or registered after it was built)"
                    ),
                    self.evidence(),
                )
            # reached by zeros only (not a zero input's doing alone: the runs are the same,
            # the change made no difference where a gradient is missing)
            starved = self._starved()
            if starved:
                return Verdict(
                    "unverified",
                    self._no_difference(
                        f"in both, {self._leaf_list(starved)} are in an optimizer's groups "
                        "and backward calls reach them, but with nothing other than zeros: "
                        "they never train, and if the change means to train them, it does not"
                    ),
                    self.evidence(),
                )
            # a hand-made change (a rule's fix declares which statement it fixes: another
            # bug of the file may stay, fixed by another fix)
            by_hand = not self.intent.declared
            trained = _read_by_steps(self.after.get("events") or [])
            asked = [
                f
                for f in self.after.get("module_freezes") or self.before.get("module_freezes") or ()
                if by_hand and f.get("leaf") in trained
            ]  # after's own statement where it has one (the runs are the same run)
            if asked:
                attribute = asked[0].get("attribute")
                what = (
                    f"`{attribute}` on a tensor, an attribute autograd never reads"
                    if attribute
                    else "`requires_grad` as an attribute of a module"
                )
                how = (
                    "the flag is `requires_grad`"
                    if attribute
                    else "`module.requires_grad_(False)` freezes its parameters"
                )
                return Verdict(
                    "unverified",
                    self._no_difference(
                        f"in both, line {asked[0].get('line')} `{asked[0].get('code')}` sets "
                        f"{what}, which freezes nothing: "
                        f"{self._leaf_list(sorted({int(f['leaf']) for f in asked}))} still "
                        f"train ({how})"
                    ),
                    self.evidence(),
                )
            drifting = sorted(moved_while_frozen(self.after)) if by_hand else []
            if drifting:
                return Verdict(
                    "unverified",
                    self._no_difference(
                        f"in both, {self._leaf_list(drifting)} change at optimizer steps "
                        "made while they do not require grad: frozen, they still move (an "
                        "optimizer with momentum or weight decay steps on the `.grad` a "
                        "freeze leaves behind; set it to None when freezing)"
                    ),
                    self.evidence(),
                )
            first_order = self._first_order_grads_kept() if by_hand else None
            if first_order is not None:
                return Verdict(
                    "unverified",
                    self._no_difference(
                        f"in both, line {first_order[0].get('line')} "
                        f"`{first_order[0].get('code')}` takes gradients without "
                        f"`create_graph` ({first_order[1]}), and "
                        "a later backward call differentiates what is computed from them as "
                        "constants (first order): if the change means the second-order term "
                        "(a meta-gradient, a gradient penalty), it does not give it "
                        "(`create_graph=True` on every `autograd.grad` feeding the loss)"
                    ),
                    self.evidence(),
                )
            reads = self._nonleaf_grad_reads_kept() if by_hand else []
            if reads:
                return Verdict(
                    "unverified",
                    self._no_difference(
                        f"in both, {reads[0]} reads `.grad` of a tensor that is not a leaf "
                        "(always None: autograd fills it only for leaves), so the run still "
                        "shows the bug a change that reads it means to fix: make the value "
                        "a leaf where it is created (requires grad after any `.to()` / "
                        "arithmetic), or call `retain_grad()` on it"
                    ),
                    self.evidence(),
                )
        if self.held_text and verdict.verified:
            verdict.reason = (
                f"leaves now trained: {self.held_text}; with them held at "
                f"their values across the optimizer's {self.after.get('held_steps', 0)} "
                f"step(s), {verdict.reason}"
            )
        restep = self._resteps_kept() if verdict.verified else None
        if restep is not None:
            return Verdict(
                "unverified",
                f"in both, line {restep.get('line')} `{restep.get('code')}` steps an optimizer "
                "again on the gradients of its last step (no backward call or reset changed "
                "them since): the same gradients stepped on twice, which the change keeps "
                f"({verdict.reason})",
                self.evidence(),
            )
        return verdict

    def _resteps_kept(self) -> dict[str, Any] | None:
        """A step made again on unchanged gradients (see ``instrument._note_restep``) by
        the same statement in both runs, after a hand-made change: the run still shows
        a bug the change may mean to fix."""
        if self.intent.declared:
            return None
        codes = {r.get("code") for r in self.before.get("resteps") or ()}
        return next((r for r in self.after.get("resteps") or () if r.get("code") in codes), None)

    def _first_order_grads_kept(self) -> tuple[dict[str, Any], str] | None:
        """An ``autograd.grad`` call at a line the change wrote, where after (still) takes
        constant gradients (no ``create_graph``) followed by a backward call, or any such
        call when the change wrote one that does create a graph: the result's derivative
        is first order in both runs. The call, and what the change wrote; None when there
        is none."""
        events = self.after.get("events") or []
        wrote = [
            e for e in events if e.get("kind") == "grad" and self._at_changed_line(e.get("line"))
        ]
        if not wrote:
            return None
        for i, event in enumerate(events):
            if event.get("kind") != "grad" or not event.get("constant"):
                continue
            if any(e.get("kind") == "backward" for e in events[i + 1 :]):
                written = (
                    "a call the change wrote"
                    if any(event is e for e in wrote)
                    else (f"the change wrote line {wrote[0].get('line')}'s `autograd.grad` call")
                )
                return event, written
        return None

    def _nonleaf_grad_reads_kept(self) -> list[str]:
        """The places (``file:line `code```) where both runs read ``.grad`` of a non-leaf."""
        before = {read.get("code") for read in self.before.get("nonleaf_grad_reads") or ()}
        return [
            f"{read.get('where')} `{read.get('code')}`"
            for read in self.after.get("nonleaf_grad_reads") or ()
            if read.get("code") in before
        ]

    def _conclude(self) -> Verdict:
        unknown = self._unknown_forward()
        if unknown:
            return Verdict("unverified", unknown, self.evidence())
        custom = self._custom_gradients()
        if (
            custom
            and self.silent_cuts
            and all(_flat(cut["finite_difference"]) for cut in self.silent_cuts)
        ):
            return Verdict(
                "unverified",
                f"after's gradient differs from before's at {len(self.silent_cuts)} "
                "element(s) where finite differences of before's forward side with after; "
                f"but the program makes gradients of its own ({', '.join(custom[:3])}): "
                "where its forward is flat they are no derivative of it, so finite "
                "differences decide nothing about them",
                self.evidence(),
            )
        if custom and self.none_where_flat:
            return Verdict(
                "unverified",
                f"after gives {self._leaf_list(self.none_where_flat)} no gradient where "
                "before raised, and finite differences of before's forward agree (it is "
                f"flat there); but the program makes gradients of its own "
                f"({', '.join(custom[:3])}): where its forward is flat, finite differences "
                "cannot tell a gradient meant to pass (a straight-through estimator) from "
                "none, so no gradient there is no proof either",
                self.evidence(),
            )
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
        while_frozen = [int(k) for k in self.before.get("held_while_frozen") or ()]
        if while_frozen:
            parts.append(
                f"before replayed with {self._leaf_list(while_frozen)} held at the optimizer "
                "steps made while they do not require grad (its optimizer moved them on a "
                "stale `.grad`), as after's freeze keeps them"
            )
        if self.before_held_text:
            parts.append(
                f"before replayed with {self.before_held_text} held at their values across "
                "its optimizer steps: the program's own freeze of them, which after keeps"
            )
        if self.silent_cuts:
            parts.append(
                "before's autograd gradient differs from finite differences of its "
                f"forward (a silent graph cut) at {len(self.silent_cuts)} element(s): "
                "compared against finite differences"
            )
        if self.discarded_gradients:
            parts.append(self._discarded_summary())
        if self.rescaled_calls:
            calls = ", ".join(f"#{i + 1}" for i in self.rescaled_calls[:4])
            parts.append(
                f"the change multiplies the objective by {_format(self.objective_scales[0])} at "
                f"backward call(s) {calls} and each gradient by the same factor (a loss "
                "averaged over the micro-batches it accumulates)"
            )
        if self.stopped_leaks:
            first = self.stopped_leaks[0]
            leaves = sorted({entry["leaf"] for entry in self.stopped_leaks})
            parts.append(
                f"before's optimizer steps {self._leaf_list(leaves)} with the gradient "
                f"backward call #{first['event'] + 1} gives them, though that call is the "
                "loss of the leaves reset just before it, not theirs (a leak after stops: "
                f"{len(self.stopped_leaks)} (call, leaf) pair(s))"
            )
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

    def _no_difference(
        self, ending: str = "a refactor; a fix whose bug this run does not show"
    ) -> str:
        """The change computes what the original computes: proven for a refactor; a fix
        whose bug this run does not show (a buffer for a tensor the optimizer never saw,
        a flag that was already set) is proven to change nothing here, and says so."""
        calls = self.before.get("event_count") or 0
        recorded = len(self.before.get("events") or ())
        each = (
            f"each of its {calls}"
            if recorded >= calls
            else f"each of the first {recorded} (those recorded) of its {calls}"
        )
        ran = (
            f"the same forward results and gradients at {each} backward call(s)"
            if calls
            else "the same module-level values, and no backward call"
        )
        return (
            f"the change computes exactly what the original does in this run ({ran}, the "
            f"same leaves and optimizer steps): {ending}"
        )

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

    def _held_independent_in_before(self, rejection: str) -> str | None:
        """The leaves the change makes train (held in this replay), when the forward parted
        at the first call and before's forward at that call gives them no gradient and
        does not depend on them, by finite differences (a threshold behind a comparison):
        a fix must then change the forward to train them. None otherwise; "" while the
        estimates are being planned."""
        held = self._held()
        events = self.before.get("events") or []
        if not held or self.forward_parted_at != 0 or not events:
            return None
        if not rejection.startswith("forward changed"):
            return None
        grads = events[0].get("grads") or {}
        if any(grads.get(str(self._runner_leaf("before", k))) is not None for k in held):
            return None  # before's forward reaches them: a cut a fix keeps the forward of
        entries = []
        for k in held:  # every leaf's estimates asked for in one round
            elements = _spread_elements(self._leaf_numel(k))
            try:
                entries.append(self._fd_entry("before", 0, k, elements, precise=True))
            except (_Unverifiable, _FdRejected):
                return None
        if any(entry is None for entry in entries):
            return "" if self.planning else None  # judged once the estimates are in
        for entry in entries:
            assert entry is not None
            estimates = _estimates(entry)
            if not estimates:
                return None
            for value, _, noise, interval in estimates.values():
                if _off_zero(value, noise, interval) is not None:
                    return None
        return self._leaf_list(held)

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
            "stopped_leaks": self.stopped_leaks,
            "identical_to_before": self.identical,
            "forward_parted_at": self.forward_parted_at,
            "gradient_parted_at": self.gradient_parted_at,
            "new_inputs": list(self.new_inputs),
            "stop_gradient_intent": self.stop_gradient_intent,
            "rescaled": {
                "factor": self.objective_scales[0] if self.objective_scales else None,
                "calls": self.rescaled_calls,
            },
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

    def _unknown_forward(self) -> str | None:
        """A change made by hand (no declared intent) whose original raised before any
        forward result, and raises or stops with autograd off too (``requires_grad`` asked
        of an integer tensor): nothing shows what the change's forward should compute, so
        gradients that match its own finite differences prove only that they are its own
        forward's, not that this is the program meant. A rule's fix declares what it keeps."""
        if self.intent.declared or not self.self_checked_events or self.forward_referenced:
            return None
        if self.before.get("event_count", 0) or self.diverged_at is not None:
            return None
        return (
            f"before raised {_short_outcome(self.before['outcome'])} before any forward "
            "result, and with autograd off it computes none either: nothing shows what the "
            "change's forward should compute (its gradients match its own finite "
            f"differences over {self.self_checked_events} backward call(s)); check that it "
            "computes what you meant, or let a rule's fix declare it"
        )

    def _custom_gradients_introduced(self) -> list[str]:
        """What after defines its own gradients with and before does not (a gradient
        reversal made an ``autograd.Function``)."""
        return sorted(
            set(self.after.get("custom_gradients") or ())
            - set(self.before.get("custom_gradients") or ())
        )

    def _custom_gradients(self) -> list[str]:
        """What either version defines its own gradients with (its ``autograd.Function``
        classes, backward hooks it registers; see ``instrument``)."""
        return sorted(
            set(self.before.get("custom_gradients") or ())
            | set(self.after.get("custom_gradients") or ())
        )
