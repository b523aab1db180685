"""From a runtime finding to the static rule's fix at that line, proven by execution.

A run tells *that* line N misbehaved and how (an in-place change of a saved tensor, a
cut graph, a nan from a masked branch); the static rules know how to rewrite such a line.
For each runtime finding the rules of its family (:data:`FAMILIES`) run on its file, and
a static finding of one of them whose statement holds line N brings its fix (and its more
precise code: a nan under ``torch.where`` is GF302, a row loop GF203). The fix is then
proven by :mod:`gradfix.proof`: the script harness (finite differences where the original
raises) when the traced command runs that very file, the command harness (the same
command, in a patched copy of the project) otherwise.

    fixes = link_fixes(result.findings)
    for fix in fixes:
        fix.verdict = prove_fix(fix, ["python", "train.py"], timeout=60)
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from gradfix.engine import FileLint, SingleFix, SourceError, single_fixes
from gradfix.fileio.files import FileError, SourceFile, read_source
from gradfix.registry import find_rule
from gradfix.rule import Finding, FixSummary, Rule
from gradfix.trace.launch import RuntimeFinding

#: The rules whose fix may apply to each kind of runtime finding, the likeliest first.
FAMILIES: dict[str, tuple[str, ...]] = {
    "inplace-saved": ("GF204", "GF202", "GF203", "GF206"),
    "view-inplace": ("GF204", "GF206"),
    "leaf-inplace": ("GF201", "GF206"),
    "view-leaf-inplace": ("GF206", "GF201"),
    "integer-grad": ("GF105",),
    "backward-twice": ("GF401",),
    "untrained-leaf": ("GF401",),
    "graph-cut": ("GF101", "GF104", "GF205", "GF102", "GF103", "GF110"),
    "no-grad-cut": ("GF101",),
    "frozen-cut": ("GF101",),
    "grad-none": ("GF101", "GF104", "GF205", "GF102", "GF103"),
    "nonfinite": ("GF302", "GF301", "GF303", "GF304"),
    "nonleaf-grad": ("GF106", "GF102", "GF103"),
    "graph-kept": ("GF403",),
}

Verdict = tuple[str, str, dict[str, Any]]  # (verified | rejected | unverified, reason, evidence)


@dataclass
class TraceFix:
    """A runtime finding with the fix of the static finding that covers its line."""

    runtime: RuntimeFinding
    static: Finding
    single: SingleFix
    original: SourceFile
    verdict: Verdict | None = None
    rules: Sequence[type[Rule]] = ()  # the rules (knowing the run's facts) that offered it
    parts: Sequence[TraceFix] = ()  # a fix of several findings proven together: its parts
    #: the fixes other rules of the family offer at the same line, the likeliest first:
    #: proven in turn when this one is rejected (``x[i] = x[i] * v`` raises as an in-place
    #: change of a saved tensor, GF204's family; GF202's rewrite is the one that holds)
    alternatives: Sequence[TraceFix] = ()

    @property
    def fixed_source(self) -> str:
        assert self.single.source is not None
        return self.single.source

    def finding(self) -> Finding:
        """The static finding's rule, position and fix, with the run's message."""
        fix = FixSummary(self.single.safety, self.single.description)
        return replace(
            self.static,
            message=f"{self.runtime.message} [from a run, step {self.runtime.step}]",
            fix=fix,
        )


def link_fixes(findings: Sequence[RuntimeFinding]) -> list[TraceFix]:
    """The fix of each runtime finding that a static rule of its family offers."""
    linked = []
    for path in sorted({f.path for f in findings}):
        here = [f for f in findings if f.path == path]
        linked += _link_file(path, here)
    return linked


def _link_file(path: str, findings: list[RuntimeFinding]) -> list[TraceFix]:
    codes = sorted({code for f in findings for code in FAMILIES.get(f.kind, (f.code,))})
    facts: dict[int, set[str]] = {}
    for finding in findings:
        for line in fix_lines(finding):
            facts.setdefault(line, set()).add(finding.kind)
    rules = [knowing(find_rule(code), facts) for code in codes]
    try:
        original = read_source(path)
        singles = single_fixes(original.text, rules=rules, path=path)
    except (FileError, SourceError):
        return []
    linked = []
    for runtime in findings:
        fixes = [
            TraceFix(runtime, static, single, original, rules=rules)
            for single, static in _covering(runtime, singles)
        ]
        if fixes:
            linked.append(replace(fixes[0], alternatives=fixes[1:]))
    return linked


def fix_lines(finding: RuntimeFinding) -> list[int]:
    """The lines a fix of ``finding`` may change: its own, and for a graph carried across
    iterations the line that made the carried value (computed once before the loop, it
    is computed anew in each step there)."""
    carried = finding.evidence.get("carried_from") if finding.kind == "backward-twice" else None
    if isinstance(carried, dict) and carried.get("path") == finding.path:
        return [finding.line, int(carried["line"])]
    return [finding.line]


def knowing(rule: type[Rule], facts: Mapping[int, set[str]]) -> type[Rule]:
    """The rule, told what the run proved at the lines of the file (:attr:`Rule.runtime`)."""
    runtime = MappingProxyType({line: frozenset(kinds) for line, kinds in facts.items()})
    return type(rule.__name__, (rule,), {"runtime": runtime, "__doc__": rule.__doc__})


def _covering(runtime: RuntimeFinding, singles: list[SingleFix]) -> list[tuple[SingleFix, Finding]]:
    """The fixes whose finding covers the runtime finding's line, the likeliest rule first
    (one per fixed text)."""
    family = FAMILIES.get(runtime.kind, (runtime.code,))
    lines = fix_lines(runtime)
    candidates = [
        (single, static)
        for single in singles
        if single.source is not None
        for static in single.findings
        if static.code in family and any(static.line <= n <= static.end_line for n in lines)
    ]
    candidates.sort(key=lambda c: (family.index(c[1].code), c[1].line != runtime.line))
    seen: set[str | None] = set()
    distinct = []
    for single, static in candidates:
        if single.source not in seen:
            seen.add(single.source)
            distinct.append((single, static))
    return distinct


def prove_fix(fix: TraceFix, command: list[str], *, timeout: float, cwd: str = ".") -> Verdict:
    """Run the program before and after the fix and compare, as ``gradfix verify``."""
    from gradfix.proof import prove_change

    path = fix.original.path
    codes = sorted({finding.code for finding in fix.single.findings})
    if _runs_script(command, path, cwd):
        return prove_change(path, fix.original.text, fix.fixed_source, timeout=timeout, rules=codes)
    from gradfix.verify.command import CommandHarness

    harness = CommandHarness(shlex.join(command), root=cwd, timeout=timeout)
    try:
        return prove_change(
            path,
            fix.original.text,
            fix.fixed_source,
            timeout=timeout,
            command=harness,
            rules=codes,
        )
    finally:
        harness.close()


def prove_fixes(
    fixes: Sequence[TraceFix],
    command: list[str],
    *,
    timeout: float,
    cwd: str = ".",
    progress: Callable[[int], Callable[[], None]] | None = None,
    findings: Sequence[RuntimeFinding] = (),
) -> list[TraceFix]:
    """Prove each fix alone; where one file has several verified fixes, prove them
    together too (one run finds each bug of a file, a write applies one fix per file).
    Returns the fixes, the ones proven together first. ``progress(total)`` returns what
    to call once each fix has its verdict (a progress bar: ``fix 2 of 5``). ``findings``:
    everything the run found; a fix rejected only for a nan gradient where the run showed
    another line making one is blocked by that bug, not disproven."""
    fixes = list(fixes)
    advance = progress(len(fixes)) if progress is not None else None
    for index, fix in enumerate(fixes):
        fix.verdict = _blocked_by_a_nan_elsewhere(
            prove_fix(fix, command, timeout=timeout, cwd=cwd), fix, findings
        )
        if advance is not None:
            advance()
        if fix.verdict[0] != "rejected":
            continue
        for alternative in fix.alternatives:  # another rule's rewrite of the same line
            alternative.verdict = prove_fix(alternative, command, timeout=timeout, cwd=cwd)
            if _verified(alternative):
                fixes[index] = alternative
                break
    together = []
    for fix in fixes:
        if fix.verdict is not None and fix.verdict[1].startswith("after raised "):
            further = _with_next_fixes(fix, command, timeout=timeout, cwd=cwd)
            if further is not None:
                together.append(further)
    for path in sorted({fix.original.path for fix in fixes}):
        verified = [f for f in fixes if f.original.path == path and _verified(f)]
        combined = _together(verified) if len(verified) > 1 else None
        if combined is not None:
            combined.verdict = prove_fix(combined, command, timeout=timeout, cwd=cwd)
            together.append(combined)
    return together + list(fixes)


def _blocked_by_a_nan_elsewhere(
    verdict: Verdict, fix: TraceFix, findings: Sequence[RuntimeFinding]
) -> Verdict:
    """A fix rejected because the fixed run's gradient is nan, where this run located a
    nan's origin on a line the fix does not touch (another file, or another line of its
    own): the fixed run reached that other bug; the fix is undecided, not disproven."""
    status, reason, evidence = verdict
    if status != "rejected" or "non-finite gradient" not in reason:
        return verdict
    touched = {(os.path.realpath(fix.original.path), line) for line in fix_lines(fix.runtime)}
    elsewhere = [
        f
        for f in findings
        if f.kind == "nonfinite" and (os.path.realpath(f.path), f.line) not in touched
    ]
    if not elsewhere:
        return verdict
    origin = elsewhere[0]
    where = f"{os.path.relpath(origin.path)}:{origin.line}"
    return (
        "unverified",
        f"blocked by the nan gradient this run traced to {where} ({origin.code}, another "
        f"bug): the fixed run reaches it; alone: {reason}",
        {**evidence, "blocked_by": where},
    )


def _together(parts: list[TraceFix]) -> TraceFix | None:
    """One fix applying the fixes of ``parts`` (of one file) in a single pass."""
    first = parts[0]
    wanted = {(p.static.code, p.static.line, p.static.col) for p in parts}
    lint = FileLint(first.original.text, rules=first.rules, path=first.original.path)
    result = lint.fixed(unsafe_fixes=True, keep=lambda f: (f.code, f.line, f.col) in wanted)
    if result.applied < len(parts) or result.source == first.original.text:
        return None  # some fixes overlap: each stays proven alone
    lines = ", ".join(str(p.static.line) for p in parts)
    findings = [finding for p in parts for finding in p.single.findings]
    safety = max((p.single.safety for p in parts), key=lambda s: s != "safe")
    description = f"the fixes at lines {lines} together"
    single = SingleFix(findings, safety, description, result.source)
    return TraceFix(first.runtime, first.static, single, first.original, rules=first.rules,
                    parts=parts)  # fmt: skip


def _with_next_fixes(
    fix: TraceFix, command: list[str], *, timeout: float, cwd: str, rounds: int = 3
) -> TraceFix | None:
    """A fix that lets the program run on into the next bug (a second in-place change, the
    next integer tensor asked for grad): trace the fixed script in a scratch copy, add the
    fix of what that run finds, and prove the whole; up to ``rounds`` times."""
    if rounds == 0 or not _runs_script(command, fix.original.path, cwd):
        return None
    import subprocess
    import tempfile

    from gradfix.trace.launch import run_trace

    with tempfile.TemporaryDirectory(prefix="gradfix-next-") as scratch:
        copy = os.path.join(scratch, os.path.basename(fix.original.path))
        with open(copy, "w", encoding="utf-8") as out:
            out.write(fix.fixed_source)
        run = run_trace([command[0], copy, *command[2:]], timeout=timeout,
                        stdout=subprocess.DEVNULL, cwd=cwd)  # fmt: skip
        found = [f for f in run.findings if os.path.realpath(f.path) == os.path.realpath(copy)]
        following = link_fixes(found)
    if not following:
        return None
    step = following[0]
    findings = [*fix.single.findings, *step.single.findings]
    description = f"{fix.single.description}, then {step.single.description}"
    single = SingleFix(findings, fix.single.safety, description, step.fixed_source)
    combined = TraceFix(fix.runtime, fix.static, single, fix.original, rules=fix.rules,
                        parts=[fix, step])  # fmt: skip
    combined.verdict = prove_fix(combined, command, timeout=timeout, cwd=cwd)
    if combined.verdict[1].startswith("after raised "):
        return _with_next_fixes(combined, command, timeout=timeout, cwd=cwd, rounds=rounds - 1)
    return combined


def _verified(fix: TraceFix) -> bool:
    return fix.verdict is not None and fix.verdict[0] == "verified"


def _runs_script(command: list[str], path: str, cwd: str) -> bool:
    """``python train.py ...`` where ``train.py`` is the fixed file."""
    if len(command) < 2 or not os.path.basename(command[0]).startswith("python"):
        return False
    script = os.path.abspath(os.path.join(cwd, command[1]))
    return os.path.realpath(script) == os.path.realpath(path)


def write_verified(fixes: Sequence[TraceFix]) -> list[TraceFix]:
    """Write each file's verified fix (the first, where a file has several: fixes proven
    together come first; the others were proven alone, run the trace again for the next).
    Returns the fixes written; a file that changed on disk meanwhile is left alone
    (``FileError``)."""
    from gradfix.fileio.files import write_source

    written = []
    done: set[str] = set()
    for fix in fixes:
        path = fix.original.path
        if not _verified(fix) or path in done:
            continue
        write_source(fix.original, fix.fixed_source)
        done.add(path)
        written.append(fix)
    return written
