"""The execution oracle: prove a rewrite by running the code before and after it.

Example::

    from gradfix.verify import verify_sources
    verdict = verify_sources(before_src, after_src, filename="train.py")
    verdict.status   # "verified" | "rejected" | "unverified"
    verdict.reason   # one line
    verdict.to_dict()

Each script runs in its own process (:mod:`.runner`; forked from a fork server that
imported torch once, see :mod:`.process`) in a fresh temporary directory, with a fixed seed,
deterministic algorithms, no GPU, a memory cap and a time limit. Instrumentation
(:mod:`.instrument`) records the leaves, the root values and gradients of every backward
call, the final outcome and the module-level tensors. When a reference gradient is missing
from BEFORE's trace (its backward raised, or gave ``None`` or nan), or AFTER's gradient
differs from BEFORE's (BEFORE may have cut its graph silently), the same process estimates
it by finite differences of BEFORE's forward (:mod:`.finite_diff`). The traces
are compared by :func:`compare_traces` (:mod:`.oracle`, whose docstring states the rules,
including what happens when BEFORE dies before its first backward call).

Importing this package does not import torch.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from gradfix.torch_facts.curated import INPLACE_SAVED
from gradfix.verify.finite_diff import NAMES_FLOAT64
from gradfix.verify.intent import FixIntent
from gradfix.verify.oracle import (
    Verdict,
    compare_traces,
    moved_while_frozen,
    newly_trained,
    plan_fd,
    stepped_leaves,
)
from gradfix.verify.process import (
    DEFAULT_MEMORY_LIMIT,
    RunnerFailure,
    RunnerProcess,
    shutdown_fork_server,
)
from gradfix.verify.sandbox import contain

__all__ = [
    "FixIntent",
    "Verdict",
    "compare_traces",
    "plan_fd",
    "shutdown_fork_server",
    "rebound_names",
    "verify_files",
    "verify_sources",
]

FD_BUDGET = 200
_SKIPPED = {"runner_error": {"kind": "skipped", "message": "not run"}}


def verify_sources(
    before_src: str,
    after_src: str,
    *,
    filename: str = "snippet.py",
    seed: int = 0,
    timeout: float = 60.0,
    fd_budget: int = FD_BUDGET,
    memory_limit: int = DEFAULT_MEMORY_LIMIT,
    source_dir: str | None = None,
    max_steps: int | None = None,
    patched: dict[str, str] | None = None,
    rules: Sequence[str] = (),
    intent: FixIntent | None = None,
) -> Verdict:
    """Execute BEFORE and AFTER and decide whether AFTER is a proven fix.

    ``timeout`` bounds each phase of each subprocess (the trace, the finite differences).
    ``source_dir`` is put on ``sys.path`` so the script's local imports resolve.
    ``max_steps``: both versions stop after that many backward calls (None: no limit), so
    that a training loop is compared over its first steps instead of timing out.
    ``patched``: files of ``source_dir`` (relative path -> text) that AFTER sees fixed
    too (the project's other fixes; BEFORE sees the files as they are).
    ``rules``: the codes of the rules whose fix AFTER is; a fix of a rule that must restore
    a gradient (:attr:`~gradfix.rule.BaseRule.fix_restores_gradient`) has the weights torch
    made checked for a lost gradient too. ``intent``: what the fix declares, when the
    caller knows it better than ``rules`` (:meth:`FixIntent.unknown` for ``--baseline``).
    """
    early = _check_syntax(before_src, after_src, filename)
    if early is not None:
        return early
    options = {
        "filename": filename,
        "seed": seed,
        "source_dir": source_dir,
        "memory_limit": memory_limit,
    }
    try:
        limits = {
            "timeout": timeout,
            "fd_budget": fd_budget,
            "max_steps": max_steps,
            "rules": tuple(rules),
            "intent": (intent if intent is not None else _declared(rules)).for_change(
                before_src, after_src
            ),
            "changed_lines": changed_lines(before_src, after_src),
        }
        return _verify(before_src, after_src, options, limits, patched or {})
    except RunnerFailure as failure:
        return Verdict(
            "unverified", f"could not start the runner: {failure}", {"filename": filename}
        )


def _verify(
    before_src: str,
    after_src: str,
    options: dict[str, Any],
    limits: dict[str, Any],
    patched: dict[str, str],
) -> Verdict:
    timeout, max_steps = limits["timeout"], limits["max_steps"]
    with (
        RunnerProcess(before_src, **options) as before_proc,
        RunnerProcess(after_src, **options, patched=patched) as after_proc,
    ):
        procs = {"before": before_proc, "after": after_proc}
        traces = {
            source: _send(proc, "trace", timeout, max_steps=max_steps)
            for source, proc in procs.items()
        }
        before: dict[str, Any] = traces["before"] or _receive(
            before_proc, before_proc.started + timeout, timeout
        )
        after: dict[str, Any] = _SKIPPED  # if before failed, the verdict is decided
        if "runner_error" not in before:
            after = traces["after"] or _receive(after_proc, after_proc.started + timeout, timeout)
        _line_up_leaf_lines(before, before_src, after_src)
        after = _hold_newly_trained(after_proc, before, after, limits)
        if "runner_error" not in after:
            before = _hold_frozen_on_purpose(before_proc, before, after, limits)
        reference, raised = None, before
        if _raised_without_backward(before, after):
            failed = _send(before_proc, "trace", timeout, max_steps=max_steps, grad_enabled=False)
            reference = failed or _receive(before_proc, time.monotonic() + timeout, timeout)
            if _ran_without_backward(reference):
                before, raised = reference, before
            else:
                reference = None
        forward_reference = None
        if _raised_before_backward(before, after):
            # what before computes up to its first backward call when autograd records
            # nothing (its error was autograd's): the forward the fix must keep
            failed = _send(
                before_proc, "trace", timeout, max_steps=1, grad_enabled=False, skip_backward=True
            )
            forward_reference = failed or _receive(before_proc, time.monotonic() + timeout, timeout)
        float64_reference = None
        if _non_finite_forward(before) and not NAMES_FLOAT64.search(before_src):
            # what before's forward computes where float32 overflows or underflows
            failed = _send(before_proc, "trace", timeout, max_steps=max_steps, float64=True)
            float64_reference = failed or _receive(before_proc, time.monotonic() + timeout, timeout)
        changed = changed_places(options["filename"], before_src, after_src)
        judge = functools.partial(
            _judge,
            procs,
            limits=limits,
            changed=changed,
            rebound=rebound_names(after_src, limits["changed_lines"]["after"]),
            forward_reference=forward_reference,
            float64_reference=float64_reference,
        )
        verdict, fd = judge(before, after)
        if _may_synchronise(verdict, limits["intent"]):
            synced = _synchronised(before_proc, after_proc, after, limits)
            if synced is not None:
                second, second_fd = judge(before, synced)
                # the forward parted only by its init (a stop-gradient left undecided
                # against the replay does not undo the first rejection)
                if second.status != "rejected" and not second.evidence.get("stop_gradient_intent"):
                    second.reason = (
                        "with the leaves' values at their first use synchronised to "
                        f"before's (the change draws other initial values): {second.reason}"
                    )
                    verdict, fd, after = second, second_fd, synced
        silent = _rewrites_an_inplace_write(before, verdict, before_src, limits)
        if verdict.status == "rejected" and (_inplace_error(before) or silent):
            dealiased = _dealiased(before_proc, before, limits)
            if dealiased is not None:
                second, second_fd = judge(dealiased, after)
                # the forward the in-place write changed; a stop-gradient the change adds
                # left undecided against the replay does not undo the first rejection
                if second.status != "rejected" and not second.evidence.get("stop_gradient_intent"):
                    why = (
                        "another name read the written tensor, so before's forward used "
                        "the written values"
                        if silent
                        else "the repair its error asks for; other names held the written tensor"
                    )
                    second.reason = (
                        "against before with its in-place writes at the lines the change "
                        f"rewrote made out of place ({why}): {second.reason}"
                    )
                    verdict, fd, before = second, second_fd, dealiased
        if _may_take_updates(verdict, limits["intent"]):
            taken = _updates_taken(before_proc, after_proc, after, limits)
            if taken is not None:
                second, _ = judge(before, taken)
                verdict = _updates_only(verdict, second, taken)
        verdict = _rewrites_the_update(verdict, before, after, limits)
        verdict = _frozen_for_the_change(verdict, before)
    if reference is not None:
        verdict = _against_autograd_off(verdict, raised)
    # last: whatever the comparison says, a run that tried to change the project proves nothing
    verdict = contain(verdict, {"before": before_proc.sandbox, "after": after_proc.sandbox})
    verdict.evidence["max_steps"] = max_steps
    verdict.evidence["filename"] = options["filename"]
    verdict.evidence["seed"] = options["seed"]
    verdict.evidence["duration_s"] = {
        "before": before.get("duration_s"),
        "after": after.get("duration_s"),
        **{f"fd_{source}": result.get("duration_s") for source, result in fd.items()},
    }
    return verdict


def _judge(
    procs: dict[str, RunnerProcess],
    before: dict[str, Any],
    after: dict[str, Any],
    *,
    limits: dict[str, Any],
    changed: set[str],
    rebound: frozenset[str],
    forward_reference: dict[str, Any] | None,
    float64_reference: dict[str, Any] | None = None,
) -> tuple[Verdict, dict[str, Any]]:
    """The verdict on two traces: the finite differences they need, the comparison, and
    a second round for the float64 estimates that confirm a float32 disagreement."""
    timeout, intent = limits["timeout"], limits["intent"]
    plan = plan_fd(
        before,
        after,
        intent=intent,
        changed=changed,
        rebound=rebound,
        float64_reference=float64_reference,
    )
    sent = {
        source: _send(
            procs[source],
            "fd",
            timeout,
            targets=targets,
            budget=limits["fd_budget"],
            time_budget=0.8 * timeout,
            constant_grads=constant_grads(intent),
            changed_lines=limits["changed_lines"][source],
        )
        for source, targets in plan.items()
    }
    deadline = time.monotonic() + timeout
    fd = {
        source: failed or _receive(procs[source], deadline, timeout)
        for source, failed in sent.items()
    }
    compare = functools.partial(
        compare_traces,
        intent=intent,
        changed=changed,
        rebound=rebound,
        forward_reference=forward_reference,
        float64_reference=float64_reference,
    )
    verdict = compare(before, after, fd or None)
    confirm = verdict.evidence.get("confirm")
    if confirm:
        # a float32 quotient disagrees with a gradient: its float64 replay decides
        fd = _confirmed(procs, fd, confirm, limits, constant_grads(intent))
        verdict = compare(before, after, fd)
    return verdict, fd


def _may_synchronise(verdict: Verdict, intent: FixIntent) -> bool:
    """A change that may change what trains (declared, or a hand-made one) whose forward
    parts from the original's: replayed with the leaves' first values synchronised, as
    registering modules changes what an init loop draws for them."""
    return (
        intent.changes_training
        and verdict.status == "rejected"
        and verdict.reason.startswith(("forward changed", "with the leaves it makes train"))
        and "forward changed" in verdict.reason
    )


def _synchronised(
    before_proc: RunnerProcess,
    after_proc: RunnerProcess,
    after: dict[str, Any],
    limits: dict[str, Any],
) -> dict[str, Any] | None:
    """AFTER replayed with each leaf set, at its first use, to BEFORE's values there (and
    the leaves it was held with held again); None when BEFORE's values are not had."""
    return _replayed_with_befores_values(before_proc, after_proc, after, limits, "first")


#: what a replay synchronised to BEFORE records there, and how AFTER is given it: at each
#: leaf's first use, or at every write and window (see ``Recorder.sync_groups``)
_SYNCHRONISED = {
    "first": ("record_first_values", "first_values", "sync"),
    "groups": ("record_group_values", "group_values", "sync_groups"),
}


def _replayed_with_befores_values(
    before_proc: RunnerProcess,
    after_proc: RunnerProcess,
    after: dict[str, Any],
    limits: dict[str, Any],
    kind: str,
) -> dict[str, Any] | None:
    """BEFORE run recording its leaves' values (``kind``), then AFTER replayed given them
    (the leaves it was held with held again); None when they are not all had or the
    replay fails."""
    record, recorded_key, sync_key = _SYNCHRONISED[kind]
    timeout, max_steps = limits["timeout"], limits["max_steps"]
    failed = _send(before_proc, "trace", timeout, max_steps=max_steps, **{record: True})
    recorded = failed or _receive(before_proc, time.monotonic() + timeout, timeout)
    values = recorded.get(recorded_key) or {}
    if not values or recorded.get(f"{recorded_key}_truncated"):
        return None
    failed = _send(
        after_proc,
        "trace",
        timeout,
        max_steps=max_steps,
        hold=after.get("held") or [],
        **{sync_key: values},
    )
    replay = failed or _receive(after_proc, time.monotonic() + timeout, timeout)
    return None if "runner_error" in replay else replay


def _may_take_updates(verdict: Verdict, intent: FixIntent) -> bool:
    """A change made by hand (a rule's fix declares what it changes, and an update is
    not among it) rejected because a forward after the first parts from before's, with
    the calls before it equal: the change may alter only what is written into the leaves
    between calls (an optimizer step's update, a target network's copy), which is
    replayed with those writes taken from before's run (:func:`_updates_taken`)."""
    parted = verdict.evidence.get("forward_parted_at")
    if parted is None and verdict.reason.startswith("gradient changed"):
        parted = verdict.evidence.get("gradient_parted_at")
    return (
        intent.changes_training
        and not intent.declared
        and verdict.status == "rejected"
        and isinstance(parted, int)
        and parted >= 1
        and not verdict.evidence.get("stop_gradient_intent")
    )


def _updates_taken(
    before_proc: RunnerProcess,
    after_proc: RunnerProcess,
    after: dict[str, Any],
    limits: dict[str, Any],
) -> dict[str, Any] | None:
    """AFTER replayed with every leaf set, at each first read after a write (and at its
    first read), to BEFORE's values there; None when BEFORE's values are not all had (past
    ``SYNC_MAX_VALUES``) or the replay fails."""
    return _replayed_with_befores_values(before_proc, after_proc, after, limits, "groups")


def _updates_only(verdict: Verdict, second: Verdict, taken: dict[str, Any]) -> Verdict:
    """``verdict`` (a forward parted after the first call), unless the replay that takes
    before's writes into the leaves agrees with before (``second`` not rejected) and shows
    the change wrote other values there: then the change alters updates, not gradients,
    and the oracle, which proves gradients, leaves it undecided."""
    written = [d for d in taken.get("sync_diverged") or [] if not d.get("first")]
    stepped = stepped_leaves(taken) or set()
    if any(not d.get("written", True) and d.get("leaf") not in stepped for d in written):
        # before wrote a leaf after never writes: what trains changed, not an update (a
        # leaf after writes between other calls is stepped on another schedule)
        return verdict
    if second.status == "rejected" and written and not second.reason.startswith("forward"):
        # what the replay shows once the updates are before's (steps that never read a
        # gradient): positive evidence the first rejection only hinted at
        second.reason = (
            "with every leaf given before's values wherever a write changed them (the "
            f"change writes other values into them): {second.reason}"
        )
        second.evidence["first_judgement"] = {"status": verdict.status, "reason": verdict.reason}
        return second
    if second.status == "rejected" or not written:
        return verdict
    names = taken.get("parameter_names") or {}
    leaves = taken.get("leaves") or []

    def label(k: int) -> str:
        if str(k) in names:
            return f"'{names[str(k)]}'"
        line = leaves[k].get("line") if k < len(leaves) else None
        return f"leaf {k}" + (f" (made at line {line})" if line else "")

    calls = (second.evidence.get("backward_events") or {}).get("after")
    agreed = (
        f"the forward results and gradients agree at each of its {calls} backward call(s)"
        if second.verified
        else f"nothing shows its forward results or gradients wrong ({second.reason})"
    )
    shown = list(dict.fromkeys(label(d["leaf"]) for d in written))
    more = f" and {len(shown) - 3} more" if len(shown) > 3 else ""
    first = written[0]
    reason = (
        f"{verdict.reason}, but only through what the change writes into the "
        f"leaves between backward calls: {', '.join(shown[:3])}{more} hold other values "
        f"than before's from before backward call #{first['before_call'] + 1} on (an "
        "optimizer step's update, a copy into a target network). Replayed with every leaf "
        f"given before's values wherever a write changed them, {agreed}. The oracle proves "
        "gradients, not what an update does with them: check the training itself (run it "
        "longer and compare the losses)"
    )
    evidence = dict(second.evidence)
    evidence["updates_differ"] = written
    evidence["first_judgement"] = {"status": verdict.status, "reason": verdict.reason}
    return Verdict("unverified", reason, evidence)


def _rewrites_the_update(
    verdict: Verdict, before: dict[str, Any], after: dict[str, Any], limits: dict[str, Any]
) -> Verdict:
    """A verified change that rewrites lines an optimizer step runs (a custom optimizer's
    ``step``, the script's helpers it calls: the runner's ``step_lines``) is unverified:
    what it changes is the update made from the gradients, which the gradients and the
    forward of the steps compared do not show (a norm clamped in an optimizer's
    normalisation, a rescale dropped from its update)."""
    if not verdict.verified:
        return verdict
    changed = limits["changed_lines"]
    rewritten = sorted(set(changed["after"]) & set(after.get("step_lines") or ()))
    removed = sorted(set(changed["before"]) & set(before.get("step_lines") or ()))
    if not rewritten and not removed:
        return verdict
    where = f"line {rewritten[0]}" if rewritten else f"the original's line {removed[0]}"
    evidence = dict(verdict.evidence)
    evidence["update_rewritten"] = {"after": rewritten, "before": removed}
    return Verdict(
        "unverified",
        f"the change rewrites code an optimizer step runs ({where}): the update it makes "
        "from the gradients, which the oracle does not prove (it proves gradients); check "
        f"the training itself. As far as gradients go: {verdict.reason}",
        evidence,
    )


def _confirmed(
    procs: dict[str, RunnerProcess],
    fd: dict[str, Any],
    confirm: list[dict[str, Any]],
    limits: dict[str, Any],
    constant: bool,
) -> dict[str, Any]:
    """``fd`` with the float64 estimates of the ``confirm`` targets merged into its
    entries (marked ``confirmed``: the oracle asks no more)."""
    timeout = limits["timeout"]
    merged: dict[str, Any] = {source: dict(result) for source, result in fd.items()}
    for source in sorted({target["source"] for target in confirm}):
        targets = [
            {key: value for key, value in target.items() if key != "source"}
            for target in confirm
            if target["source"] == source
        ]
        failed = _send(
            procs[source],
            "fd",
            timeout,
            targets=targets,
            budget=len(targets) * 4,
            time_budget=0.8 * timeout,
            constant_grads=constant,
            changed_lines=limits["changed_lines"][source],
        )
        answer = failed or _receive(procs[source], time.monotonic() + timeout, timeout)
        entries = [dict(e) for e in merged.get(source, {}).get("entries", [])]
        for new in answer.get("entries", []):
            for entry in entries:
                if (entry.get("event"), entry.get("leaf")) == (new.get("event"), new.get("leaf")):
                    entry["precise"] = list(entry.get("precise") or []) + list(
                        new.get("precise") or []
                    )
                    if new.get("precise_error"):
                        entry["precise_error"] = new["precise_error"]
                    elif not new.get("precise"):
                        entry["precise_error"] = new.get("error") or "no float64 estimate"
        if source in merged:
            merged[source] = dict(merged[source], entries=entries)
    return {source: dict(result, confirmed=True) for source, result in merged.items()}


def _declared(rules: Sequence[str]) -> FixIntent:
    """What the fixes of these rules declare (the rules read here, never by the oracle)."""
    from gradfix.registry import fix_intent

    return fix_intent(rules)


def changed_lines(before_src: str, after_src: str) -> dict[str, list[int]]:
    """The lines of each version the change wrote or removed (replaced, inserted, deleted,
    by number in that version): a ``torch.no_grad()`` block there is the change's, no
    stop-gradient the program meant, so finite differences count the values read in it
    (see ``Recorder.changed_lines``)."""
    import difflib

    matcher = difflib.SequenceMatcher(
        None, before_src.splitlines(), after_src.splitlines(), autojunk=False
    )
    lines: dict[str, list[int]] = {"before": [], "after": []}
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            lines["before"] += range(i1 + 1, i2 + 1)
            lines["after"] += range(j1 + 1, j2 + 1)
    return lines


def rebound_names(after_src: str, lines: Iterable[int]) -> frozenset[str]:
    """The names (``w``, ``self.w``) that AFTER's statements on the changed ``lines``
    bind: what the change made of them is the change's doing (a name rebound to a
    non-leaf whose ``.grad`` the program reads later)."""
    import ast

    from gradfix.pyast import parse

    wanted = set(lines)
    try:
        tree = parse(after_src)
    except (SyntaxError, ValueError):
        return frozenset()
    names: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt):
            continue
        body = getattr(node, "body", None)
        end = body[0].lineno - 1 if body else (node.end_lineno or node.lineno)
        span = range(node.lineno, max(end, node.lineno) + 1)  # a block's header only
        if not wanted.intersection(span):
            continue
        if isinstance(node, ast.Assign):
            targets: list[ast.expr] = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For)):
            targets = [node.target]
        elif isinstance(node, ast.With):
            targets = [item.optional_vars for item in node.items if item.optional_vars]
        else:
            continue
        for target in targets:
            for part in ast.walk(target):
                if isinstance(part, (ast.Name, ast.Attribute)) and isinstance(part.ctx, ast.Store):
                    names.add(ast.unparse(part))
    return frozenset(names)


def changed_places(filename: str, before_src: str, after_src: str) -> set[str]:
    """``file:line`` (as the runner names a failing place) of each line of AFTER that the
    change wrote: inserted or replaced lines, and the line after a deletion."""
    import difflib

    matcher = difflib.SequenceMatcher(
        None, before_src.splitlines(), after_src.splitlines(), autojunk=False
    )
    lines: set[int] = set()
    for tag, _, _, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            lines.update(range(j1 + 1, max(j2, j1 + 1) + 1))
    return {f"{filename}:{line}" for line in lines}


def _hold_newly_trained(
    proc: RunnerProcess, before: dict[str, Any], after: dict[str, Any], limits: dict[str, Any]
) -> dict[str, Any]:
    """AFTER's trace to compare: for a fix that may change what trains
    (:attr:`~gradfix.verify.intent.FixIntent.changes_training`) and makes the optimizer step
    leaves BEFORE never steps, AFTER replayed with those leaves restored after each
    optimizer step (the same session: its finite differences hold them too). Every
    forward result and gradient of the replay must then equal BEFORE's."""
    if not limits["intent"].changes_training:
        return after
    trained = newly_trained(before, after)
    if not trained:
        return after
    timeout = limits["timeout"]
    failed = _send(proc, "trace", timeout, max_steps=limits["max_steps"], hold=trained)
    return failed or _receive(proc, time.monotonic() + timeout, timeout)


def _non_finite_forward(trace: dict[str, Any]) -> bool:
    """Some backward call of the trace differentiates a nan or infinite value."""
    for event in trace.get("events") or ():
        for root in event.get("roots") or ():
            if any(isinstance(v, str) for v in root.get("values") or ()):
                return True
    return False


def _line_up_leaf_lines(before: dict[str, Any], before_src: str, after_src: str) -> None:
    """Give each of BEFORE's leaves made on a line the change kept ``match_line``, that
    line's number in AFTER: a change that inserts lines above a layer (a comment, an
    import) does not make its parameters other leaves."""
    import difflib

    matcher = difflib.SequenceMatcher(
        None, before_src.splitlines(), after_src.splitlines(), autojunk=False
    )
    shift: dict[int, int] = {}
    for tag, i1, i2, j1, _ in matcher.get_opcodes():
        if tag == "equal":
            shift.update({i1 + n + 1: j1 + n + 1 for n in range(i2 - i1)})
    for leaf in before.get("leaves") or ():
        line = leaf.get("line")
        if line in shift and shift[line] != line:
            leaf["match_line"] = shift[line]


def _hold_frozen_on_purpose(
    proc: RunnerProcess, before: dict[str, Any], after: dict[str, Any], limits: dict[str, Any]
) -> dict[str, Any]:
    """BEFORE's trace to compare: where AFTER freezes leaves by a statement BEFORE runs too
    (``self.weight.requires_grad = False``, which BEFORE applied to a tensor it then
    replaced, training the parameter it meant to freeze), BEFORE replayed with those
    leaves restored after each optimizer step: the values the program meant them to
    keep. Its gradients of them are not compared (AFTER's do not exist)."""
    own = {f.get("code") for f in before.get("freezes") or () if f.get("code")}
    # a statement that froze the same leaf in before too is no freeze before missed
    pairs = {(f.get("code"), f.get("leaf")) for f in before.get("freezes") or ()}
    trained_after = stepped_leaves(after) or set()
    # frozen again by a statement before runs too, where before's freeze missed the leaf
    refrozen = {
        int(f["leaf"])
        for f in after.get("freezes") or ()
        if f.get("leaf") is not None
        and f.get("code") in own
        and (f.get("code"), f.get("leaf")) not in pairs
    }
    blanket = _unfrozen_by_a_blanket(before, after, trained_after)
    asked = {
        int(f["leaf"]) for f in before.get("module_freezes") or () if f.get("leaf") is not None
    }
    by_change = {
        k: f
        for k, f in _frozen_by_the_change(after, trained_after, limits).items()
        # not a freeze before asked for (a misspelt flag, a module's attribute)
        if k not in refrozen | blanket | asked
    }
    frozen = sorted(
        (
            # not those frozen there for a while only (a first stage), as in before
            (refrozen - trained_after)
            | blanket
            # a freeze asked with ``module.requires_grad = False`` (which froze nothing),
            # made another way (the optimizer given every parameter but that module's)
            | (asked - trained_after)
        )
        & (stepped_leaves(before) or set())
        # the change's own freeze: held whatever writes them in before (`.data` too)
        | set(by_change)
    )
    # leaves before's optimizer moves while they are frozen (momentum on a stale
    # `.grad`) where after's does not: held in before at those steps only
    while_frozen = sorted(moved_while_frozen(before) - moved_while_frozen(after))
    if (not frozen and not while_frozen) or "runner_error" in before:
        return before
    timeout = limits["timeout"]
    failed = _send(
        proc,
        "trace",
        timeout,
        max_steps=limits["max_steps"],
        hold=frozen,
        **({"hold_frozen": while_frozen} if while_frozen else {}),
    )
    replay = failed or _receive(proc, time.monotonic() + timeout, timeout)
    if "runner_error" in replay:
        return before
    held = [by_change[k] for k in frozen if k in by_change]
    if held:
        replay["frozen_by_change"] = held
    return replay


def _frozen_by_the_change(
    after: dict[str, Any], trained_after: set[int], limits: dict[str, Any]
) -> dict[int, dict[str, Any]]:
    """Leaves a change made by hand freezes with a statement it wrote (``p.requires_grad =
    False``) and AFTER then never steps: what trains is the change's to decide, so BEFORE
    is replayed with them held, and a verdict that agrees says what it cannot prove."""
    if limits["intent"].declared:
        return {}
    changed = set(limits["changed_lines"]["after"])
    return {
        int(f["leaf"]): f
        for f in after.get("freezes") or ()
        if f.get("leaf") is not None
        and f.get("line") in changed
        and int(f["leaf"]) not in trained_after
    }


def _frozen_for_the_change(verdict: Verdict, before: dict[str, Any]) -> Verdict:
    """A verdict reached with BEFORE's leaves held that the change freezes (see
    :func:`_frozen_by_the_change`) proves the rest, not the freeze: unverified."""
    held = before.get("frozen_by_change") or []
    if not verdict.verified or not held:
        return verdict
    first = held[0]
    evidence = dict(verdict.evidence)
    evidence["frozen_by_change"] = held
    return Verdict(
        "unverified",
        f"the change freezes {len(held)} leaf tensor(s) before trains (line "
        f"{first.get('line')} `{first.get('code')}`): whether they should train is its "
        "intent, which a run cannot show. With them held in before as well: "
        f"{verdict.reason}",
        evidence,
    )


def _inplace_error(trace: dict[str, Any]) -> bool:
    """BEFORE failed because a tensor autograd saved was modified in place."""
    outcome = trace.get("outcome") or {}
    return outcome.get("category") == "code" and INPLACE_SAVED in str(outcome.get("message"))


def _rewrites_an_inplace_write(
    before: dict[str, Any], verdict: Verdict, before_src: str, limits: dict[str, Any]
) -> bool:
    """BEFORE ran to the end, the change rewrote a line that writes in place, and the
    forward changed: where another name reads the written tensor (an inplace ReLU's input
    kept by a skip connection) its out-of-place repair changes the forward on purpose."""
    if (before.get("outcome") or {}).get("status") != "ok":
        return False
    if not verdict.reason.startswith("forward changed"):
        return False
    return _writes_in_place(before_src, set(limits["changed_lines"]["before"]))


def _writes_in_place(source: str, lines: set[int]) -> bool:
    """A statement of ``source`` at one of ``lines`` writes a tensor in place, by torch's
    facts: an augmented assignment (``x += y``), an in-place method (``x.add_(y)``), a
    call with ``inplace=True``, or an ``nn`` module that has an ``inplace`` flag built
    with a literal ``True`` (``nn.ReLU(True)``, ``nn.LeakyReLU(0.2, True)``)."""
    import ast

    from gradfix.torch_facts import functional_of_module, is_inplace_method

    def true(node: ast.expr) -> bool:
        return isinstance(node, ast.Constant) and node.value is True

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) not in lines:
            continue
        if isinstance(node, ast.AugAssign) and not isinstance(node.op, ast.MatMult):
            return True
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if is_inplace_method(name) or any(
            k.arg == "inplace" and true(k.value) for k in node.keywords
        ):
            return True
        module = functional_of_module(name)
        if module is not None and module[1] and any(map(true, node.args)):
            return True
    return False


def _dealiased(
    proc: RunnerProcess, before: dict[str, Any], limits: dict[str, Any]
) -> dict[str, Any] | None:
    """BEFORE replayed with the in-place writes at the lines the change rewrote made out
    of place (``x += pos`` on a tensor another module reads too), where that replay runs
    past BEFORE's error: the program its error's repair means. None where it changes
    nothing (the same error at the same place) or fails to run."""
    lines = sorted(limits["changed_lines"]["before"])
    if not lines:
        return None
    timeout = limits["timeout"]
    failed = _send(proc, "trace", timeout, max_steps=limits["max_steps"], dealias=lines)
    replay = failed or _receive(proc, time.monotonic() + timeout, timeout)
    if "runner_error" in replay:
        return None
    outcome, original = replay.get("outcome") or {}, before.get("outcome") or {}
    if original.get("status") == "ok":  # a silent write: the replay must run to the end too
        return replay if outcome.get("status") == "ok" else None
    if (outcome.get("message"), outcome.get("line")) == (
        original.get("message"),
        original.get("line"),
    ):
        return None  # the same failure: no write at those lines was the one
    return replay


def _unfrozen_by_a_blanket(
    before: dict[str, Any], after: dict[str, Any], trained_after: set[int]
) -> set[int]:
    """Leaves BEFORE made frozen on purpose (``nn.Parameter(b, requires_grad=False)``) and
    then trains only because a statement unfreezing many tensors caught them too
    (``model.requires_grad_(True)``), while AFTER trains no parameter of that name: the
    freeze that names the tensor is the one the program meant."""
    names_b, names_a = before.get("parameter_names") or {}, after.get("parameter_names") or {}
    trained_names = {names_a.get(str(k)) for k in trained_after}
    blankets = {code for code, count in (before.get("unfreezes") or {}).items() if count > 1}
    return {
        int(leaf["index"])
        for leaf in before.get("leaves") or ()
        if leaf.get("made_frozen")
        and leaf.get("unfrozen_by") in blankets
        and (name := names_b.get(str(leaf["index"])))
        and name not in trained_names
    }


def constant_grads(intent: FixIntent) -> bool:
    """Whether finite differences hold the gradients of ``autograd.grad`` calls without
    ``create_graph`` constant, as autograd does (every fix but one that makes them
    differentiable, GF406's; and a change made by hand, whose intent is unknown)."""
    return not intent.differentiates_gradients


def _raised_without_backward(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """BEFORE failed in its own code (not for want of a module, a file or CUDA) and
    neither version made a backward call, while AFTER ran to the end: the fix can only be
    judged against what BEFORE computes when autograd records nothing."""
    outcome = before.get("outcome") or {}
    return (
        outcome.get("status") == "error"
        and outcome.get("category") == "code"
        and not before.get("event_count")
        and _ran_without_backward(after)
    )


def _raised_before_backward(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """BEFORE failed in its own code before any backward call, and AFTER made some: the
    forward results of AFTER's first call can only be checked against BEFORE run with
    autograd off (an in-place change of a leaf raises only while autograd records)."""
    outcome = before.get("outcome") or {}
    return (
        outcome.get("status") == "error"
        and outcome.get("category") == "code"
        and not before.get("event_count")
        and bool(after.get("event_count"))
    )


def _ran_without_backward(trace: dict[str, Any]) -> bool:
    return (trace.get("outcome") or {}).get("status") == "ok" and not trace.get("event_count")


def _against_autograd_off(verdict: Verdict, raised: dict[str, Any]) -> Verdict:
    """The verdict of AFTER against BEFORE run with autograd off, saying so.

    A script that never calls backward computes the same values whether autograd records
    or not; only autograd's own checks differ (an in-place change of a leaf that requires
    grad raises while recording). So where BEFORE raised, ran to the end with autograd off
    and neither version calls backward, the values it then computes are what the fix must
    keep: AFTER is verified when its module-level tensors equal them, rejected when one
    differs (a fix that skipped the change, or changed another value)."""
    outcome = raised.get("outcome") or {}
    line = outcome.get("line")
    message = str(outcome.get("message") or "").rstrip(".")
    failure = f"{outcome.get('type')}{f' at line {line}' if line else ''}: {message}"
    reference = (
        f"before raised {failure}; with autograd off it runs to the end, and neither version "
        "calls backward"
    )
    verdict.evidence["reference"] = "before with autograd off"
    verdict.evidence["before_outcome"] = outcome
    if verdict.status == "verified":
        reason = verdict.reason.replace(
            "forward values equal", "values equal to before's with autograd off", 1
        )
        return Verdict("verified", f"{reference}: {reason}", verdict.evidence)
    return Verdict(
        verdict.status, f"{reference}; against that run: {verdict.reason}", verdict.evidence
    )


def verify_files(
    before_path: str | os.PathLike[str], after_path: str | os.PathLike[str], **options: Any
) -> Verdict:
    """:func:`verify_sources` on two files (read only, never written)."""
    before = Path(before_path)
    options.setdefault("filename", before.name)
    options.setdefault("source_dir", str(before.resolve().parent))
    return verify_sources(
        before.read_text(encoding="utf-8"), Path(after_path).read_text(encoding="utf-8"), **options
    )


def _check_syntax(before_src: str, after_src: str, filename: str) -> Verdict | None:
    for label, source in (("after", after_src), ("before", before_src)):
        try:
            compile(source, filename, "exec", dont_inherit=True)
        except SyntaxError as exc:
            status = "rejected" if label == "after" else "unverified"
            return Verdict(
                status,
                f"{label} does not compile: {filename}:{exc.lineno}: {exc.msg}",
                {"stage": "compile"},
            )
    return None


def _send(proc: RunnerProcess, mode: str, timeout: float, **fields: Any) -> dict[str, Any] | None:
    """Send a request; None when sent, else a ``runner_error`` entry."""
    try:
        proc.send(mode, timeout=timeout, **fields)
    except RunnerFailure as failure:
        return _failure(failure, timeout)
    return None


def _failure(failure: RunnerFailure, timeout: float) -> dict[str, Any]:
    message = f"timeout after {timeout:g} s" if failure.kind == "timeout" else str(failure)
    return {"runner_error": {"kind": failure.kind, "message": message}}


def _receive(proc: RunnerProcess, deadline: float, timeout: float) -> dict[str, Any]:
    """The runner's answer, or a ``runner_error`` entry saying why there is none."""
    try:
        return proc.receive(deadline)
    except RunnerFailure as failure:
        return _failure(failure, timeout)
