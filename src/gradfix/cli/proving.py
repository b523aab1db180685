"""Proving fixes by execution, shared by ``fix`` (``--verify`` and ``--write``'s default) and
``verify``: each fix is judged, then only the accepted ones are kept."""

from __future__ import annotations

import contextlib
import enum
from typing import TYPE_CHECKING, Any

import typer

from gradfix.cli.common import EXIT_ERROR, echo_stderr
from gradfix.shorten import shorten

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from gradfix.proof import FixVerdict
    from gradfix.rule import Finding
    from gradfix.runner import Executor, FileResult, Progress, RunOptions, RunResult
    from gradfix.verify.command import CommandHarness


class VerifyMode(enum.Enum):
    """How ``fix`` proves its fixes (see :func:`verify_mode`)."""

    off = "off"  # static: --no-verify, a preview, or torch missing
    default = "default"  # --write: rejected fixes are dropped, unverified follow safety
    strict = "strict"  # --verify: only verified fixes (unverified with --unsafe-fixes)


def verify_run(
    run: RunResult,
    options: RunOptions,
    harness: dict[str, Any],
    *,
    strict: bool = True,
    jobs: int = 2,
    executor: Executor | None = None,
    progress: Progress | None = None,
) -> dict[str, list[FixVerdict]]:
    """Judge every fix of every changed file (alone, with the file's other fixes, and
    across files with the project's other fixes), then keep (and with --write, write)
    only the accepted ones, once the accepted fixes of a file together are proven.
    ``strict`` (``--verify``, ``verify``): every fix is judged and only verified ones are
    accepted (unverified ones too with --unsafe-fixes); otherwise (``fix --write``'s
    default) only the fixes the safety classes apply are judged, and only rejected ones
    are dropped. ``harness``: keyword arguments of :func:`gradfix.proof.verify_fixes`.
    Verdict lines go to stderr when writing. On a Ray ``executor`` each file's fixes are
    judged on the cluster (:func:`gradfix.ray_executor.verify_on`). ``progress`` counts
    the fixes judged, as each file's verdicts come back."""
    from gradfix.proof import one_run
    from gradfix.runner import write_result

    judged = _fixes_judged(run, progress)
    with one_run():
        verdicts, candidates = _judge_files(
            run, options, harness, strict=strict, jobs=jobs, executor=executor, judged=judged
        )
        _judge_across_files(run, verdicts, candidates, harness)
        for result in run.files:
            found = verdicts.get(result.path)
            if found is None or result.original is None:
                continue
            together = _keep_accepted(result, found, options, harness, strict=strict)
            result.held = held_back(result, found, options, strict=strict, together=together)
            if options.write:
                for verdict in found:
                    echo_stderr(verdict.line())
                write_result(result, run.tree)
    return verdicts


def _fixes_judged(run: RunResult, progress: Progress | None) -> Callable[[int], None]:
    """``judged(n)``: n more fixes have their verdicts (a progress bar over the fixes of
    the changed files; nothing without ``progress``)."""
    if progress is None:
        return lambda count: None

    advance = progress(sum(r.applied_count for r in run.files if r.error is None))

    def judged(count: int) -> None:
        for _ in range(count):
            advance()

    return judged


def _judge_files(
    run: RunResult,
    options: RunOptions,
    harness: dict[str, Any],
    *,
    strict: bool,
    jobs: int,
    executor: Executor | None = None,
    judged: Callable[[int], None] = lambda count: None,
) -> tuple[dict[str, list[FixVerdict]], dict[str, str]]:
    """The verdicts of each changed file's fixes (``jobs`` fixes judged at once, or each
    file on the cluster of a Ray ``executor``), and its text with all of them; ``judged``
    is told how many fixes each file had judged, as they are."""
    from gradfix.engine import SourceError
    from gradfix.proof import verify_fixes
    from gradfix.verify.harness import EntryError

    verdicts: dict[str, list[FixVerdict]] = {}
    candidates: dict[str, str] = {}
    remote = _judged_on_cluster(
        run, options, harness, strict=strict, executor=executor, judged=judged
    )
    for result in run.files:
        if result.error is not None or not result.changed or result.original is None:
            continue
        unsafe = strict or options.unsafe_fixes
        try:
            found = remote.get(result.path)
            if isinstance(found, Exception):
                raise found
            if found is None:
                found = verify_fixes(
                    result.path,
                    result.original,
                    rules=options.rules,
                    unsafe=unsafe,
                    jobs=jobs,
                    **harness,
                )
                judged(len(found))
        except (SourceError, EntryError) as error:
            result.error = str(error)
            continue
        except RuntimeError as error:  # the cluster lost the file's verification
            result.error = str(error)
            continue
        verdicts[result.path] = found
        candidates[result.path] = result.fixed or result.original
    return verdicts, candidates


def _judged_on_cluster(
    run: RunResult,
    options: RunOptions,
    harness: dict[str, Any],
    *,
    strict: bool,
    executor: Executor | None,
    judged: Callable[[int], None],
) -> dict[str, Any]:
    """path -> the verdicts (or the error) of each changed file's fixes judged on a Ray
    ``executor``; empty without one. ``judged`` counts each file's verdicts as they come
    back from the cluster."""
    if executor is None:
        return {}
    from gradfix.fileio.files import is_notebook
    from gradfix.ray_executor import RayExecutor, verify_on

    if not isinstance(executor, RayExecutor):
        return {}
    judged_files = [
        r
        for r in run.files
        if r.error is None and r.changed and r.original is not None and not is_notebook(r.path)
    ]
    files = [(r.path, r.original or "") for r in judged_files]
    unsafe = strict or options.unsafe_fixes
    # what _keep_accepted will prove of each file, proven on the cluster beside the rest
    unverified = options.unsafe_fixes or not strict
    together = [(options.rules_for(r.path), options.unsafe_fixes, unverified) for r in judged_files]
    found = verify_on(
        executor,
        files,
        rules=options.rules,
        unsafe=unsafe,
        limits=harness,
        judged=judged,
        together=together,
    )
    return {path: verdicts for (path, _), verdicts in zip(files, found)}


def _judge_across_files(
    run: RunResult,
    verdicts: dict[str, list[FixVerdict]],
    candidates: dict[str, str],
    harness: dict[str, Any],
) -> None:
    """A fix stopped by another file's bug in both versions is judged again with the
    fixes of the project's other files in place (those with no rejected fix); still not
    verified, with all of them: a fix judged alone may be rejected only for the bug
    another file still has (its run goes through that file), and a run of all the fixes
    together that is proven shows it was not wrong."""
    from gradfix.proof import prove_with_project

    sound = {
        path: text
        for path, text in candidates.items()
        if all(v.status != "rejected" for v in verdicts[path])
    }
    for result in run.files:
        if result.path not in verdicts or result.original is None:
            continue
        fixed = candidates[result.path]
        others = {path: text for path, text in sound.items() if path != result.path}
        found = prove_with_project(verdicts[result.path], result.original, fixed, others, **harness)
        every = {path: text for path, text in candidates.items() if path != result.path}
        if len(every) > len(others):  # (nothing pending: returned as they are)
            found = prove_with_project(found, result.original, fixed, every, **harness)
        verdicts[result.path] = found


def _applicable_left(result: FileResult, options: RunOptions) -> list[Finding]:
    """The findings left with a fix the run applies (safe, or unsafe with --unsafe-fixes)."""
    return [
        f
        for f in result.remaining
        if f.fix is not None and (f.fix.safety == "safe" or options.unsafe_fixes)
    ]


def _keep_accepted(
    result: FileResult,
    found: list[FixVerdict],
    options: RunOptions,
    harness: dict[str, Any],
    *,
    strict: bool,
) -> str | None:
    """Refix ``result`` with the accepted fixes only; none when together they fail.
    Returns the verdict that refused them together (``rejected``), None when applied."""
    from gradfix.proof import accepted, finding_key

    assert result.original is not None
    keys = accepted(found, unverified=options.unsafe_fixes or not strict)
    refused = _refix_proven(result, keys, options, harness, strict=strict)
    if refused is None:
        return None
    echo_stderr(
        f"{result.path}: the accepted fixes together are {refused[0]}: {shorten(refused[1])}"
    )
    # a fix verified only with the others (it overlaps one: applied first, it takes the
    # other's place) falls with them; the ones verified alone may still hold together
    alone = {
        finding_key(v.finding)
        for v in found
        if v.status == "verified" and "proven" not in v.evidence
    } & keys
    if (
        alone
        and alone != keys
        and _refix_proven(result, alone, options, harness, strict=strict) is None
    ):
        echo_stderr(f"{result.path}: the fixes verified alone are applied")
        return refused[0]
    # one fix may spoil the others (its change of the trajectory, another bug's error): the
    # largest set without one of them that is not refused is applied, the one left out
    # stays; fixes not verified alone and declared to change what trains go first
    if 1 < len(keys) <= MAX_LEFT_OUT_TRIES:
        for left_out in sorted(keys, key=lambda key: _spoiler_rank(key, found)):
            rest = keys - {left_out}
            if rest == alone:
                continue  # tried above
            if _refix_proven(result, rest, options, harness, strict=strict) is None:
                echo_stderr(
                    f"{result.path}: the accepted fixes but {left_out[2]} at line "
                    f"{left_out[0]} are applied together"
                )
                return refused[0]
    result.fixed, result.remaining = result.original, list(result.findings)
    return refused[0]


#: how many accepted fixes of a file refused together are each tried left out (a proof
#: each): past that, the file's fixes are held back whole
MAX_LEFT_OUT_TRIES = 4


def _spoiler_rank(key: tuple[int, int, str], found: list[FixVerdict]) -> tuple[bool, bool, Any]:
    """How early to leave a fix out of a refused set: first those not verified alone, of
    them first those whose rule declares a change of what trains (a trajectory that
    parts from the original's on purpose spoils a joint proof of the others)."""
    from gradfix.proof import finding_key
    from gradfix.registry import fix_intent

    verified = any(finding_key(v.finding) == key and v.status == "verified" for v in found)
    return (verified, not fix_intent([key[2]]).changes_training, key)


#: why a fix the run would apply was not (:attr:`FileResult.held`)
HELD_REJECTED = "rejected by verification"
HELD_UNVERIFIED = "unverified, applied only with --unsafe-fixes"
HELD_TOGETHER = "{} together with the file's other fixes"
HELD_LATER = "available only after another one, proven by the next run"


def held_back(
    result: FileResult,
    found: list[FixVerdict],
    options: RunOptions,
    *,
    strict: bool,
    together: str | None,
) -> list[str]:
    """One reason per finding left with a fix the run would apply (safe, or unsafe with
    --unsafe-fixes): its fix was rejected, unverified under --verify, refused with the
    file's other fixes, or it exists only on the fixed text (a fix that another fix makes
    possible is not proven in this run)."""
    from gradfix.proof import may_apply

    unverified_ok = options.unsafe_fixes or not strict
    reasons = []
    for verdict in found:
        if not (verdict.safety == "safe" or options.unsafe_fixes):
            continue
        if verdict.status == "rejected":
            reasons.append(HELD_REJECTED)
        elif not may_apply(verdict.status, unverified=unverified_ok):
            reasons.append(HELD_UNVERIFIED)
    left = len(_applicable_left(result, options))
    rest = max(0, left - len(reasons))
    later = HELD_LATER if together is None else HELD_TOGETHER.format(together)
    return reasons[:left] + [later] * rest


def _refix_proven(
    result: FileResult,
    keys: set[tuple[int, int, str]],
    options: RunOptions,
    harness: dict[str, Any],
    *,
    strict: bool,
) -> tuple[str, str] | None:
    """Refix ``result`` with the fixes of ``keys``; (status, reason) when several of them
    together are refused (None: applied, or a single fix, proven alone)."""
    from gradfix.proof import finding_key, prove_change
    from gradfix.runner import refix_selected

    assert result.original is not None
    refix_selected(result, options, lambda finding: finding_key(finding) in keys)
    if len(keys) < 2 or not result.changed or result.fixed is None:
        return None
    codes = sorted({code for _, _, code in keys})  # fixes that must restore a gradient
    status, reason, _ = prove_change(
        result.path, result.original, result.fixed, rules=codes, **harness
    )
    refused = status == "rejected" or (
        status == "unverified" and strict and not options.unsafe_fixes
    )
    return (status, reason) if refused else None


def drive_options(entry: str | None, command: str | None, *, verifies: bool) -> None:
    """Check ``--entry`` / ``--cmd``: one of them, a valid entry, and a run that verifies
    (they say how the verifier drives the code; without verification nothing runs)."""
    if entry is not None and command is not None:
        echo_stderr("error: give either --cmd or --entry, not both")
        raise typer.Exit(EXIT_ERROR)
    if entry is None and command is None:
        return
    if not verifies:
        option = "--cmd" if command is not None else "--entry"
        echo_stderr(f"error: {option} drives the verification: add --verify (or --write)")
        raise typer.Exit(EXIT_ERROR)
    if entry is not None:
        from gradfix.cli.common import check_entry

        check_entry(entry)


@contextlib.contextmanager
def command_harness(
    command: str | None, timeout: float, max_steps: int | None, seed: int = 0
) -> Iterator[CommandHarness | None]:
    """The harness of ``--cmd`` (the user's command run before and after each fix) for
    the run, removed at its end; ``None`` without ``--cmd``."""
    if command is None:
        yield None
        return
    from gradfix.proof import DEFAULT_MAX_STEPS
    from gradfix.verify.command import CommandHarness

    steps = DEFAULT_MAX_STEPS if max_steps is None else max_steps or None
    harness = CommandHarness(command, timeout=timeout, seed=seed, max_steps=steps)
    try:
        yield harness
    finally:
        harness.close()


def harness_limits(timeout: float, max_steps: int | None, **more: Any) -> dict[str, Any]:
    """The keyword arguments of :func:`gradfix.proof.verify_fixes` the options give."""
    limits = {"timeout": timeout, **more}
    if max_steps is not None:
        limits["max_steps"] = max_steps or None  # 0: no limit
    return limits


def verify_mode(verify: bool | None, *, write: bool) -> VerifyMode:
    """--verify: strict; --no-verify: off; by default --write verifies when torch can be
    imported (a note says when it cannot: static check and fix never need torch)."""
    from gradfix.proof import torch_available

    if verify is not None:
        if verify:
            require_torch()
        return VerifyMode.strict if verify else VerifyMode.off
    if not write:
        return VerifyMode.off
    if torch_available():
        return VerifyMode.default
    echo_stderr(
        "note: torch cannot be imported: the fixes are written without verification "
        "(pip install 'gradfix[verify]' to prove them; --no-verify skips this note)"
    )
    return VerifyMode.off


def require_torch() -> None:
    from gradfix.proof import torch_available

    if not torch_available():
        echo_stderr(
            "error: verification executes the code and needs torch: "
            "pip install 'gradfix[verify]' (static check and fix do not)"
        )
        raise typer.Exit(EXIT_ERROR)
