"""Verified fixes on user code: one verdict per fix (``gradfix verify``, ``fix --verify``).

Each fix the rules offer on a file is applied *alone* to the file as read, and the
original and the fixed source are executed by the oracle (:mod:`gradfix.verify`): the
fixed code must keep the forward results and give finite gradients equal to the true
derivative of the original. Nothing is written; the user's files are only read (the
oracle runs copies in temporary directories, with the file's own directory importable).

    verdicts = verify_fixes("train.py", source, rules=select_rules())
    for v in verdicts:
        print(v.line())   # train.py:12:1: GF201 verified: forward values equal ...

torch is imported only by the oracle's runner processes; :func:`torch_available` tells
whether verification can run at all.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import os
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gradfix import pyast
from gradfix.engine import SingleFix, lint_source, single_fixes
from gradfix.fileio.files import is_notebook
from gradfix.rule import Finding, Rule
from gradfix.shorten import shorten

if TYPE_CHECKING:
    from gradfix.verify.command import CommandHarness

VERDICTS = ("verified", "rejected", "unverified")
DEFAULT_TIMEOUT = 60.0
#: backward calls after which both versions stop (a training loop need not finish)
DEFAULT_MAX_STEPS = 20
#: how the oracle says that a run made no backward call
NOTHING_TO_COMPARE = "nothing to compare"


@dataclass
class FixVerdict:
    """The verdict on one fix, reported at each finding the fix resolves."""

    path: str
    finding: Finding
    status: str  # verified | rejected | unverified
    reason: str
    safety: str
    description: str
    evidence: dict[str, Any] = field(default_factory=dict)

    #: a notebook's finding in its cell (``finding`` is at its place in the joined program
    #: the verifier ran, as the fixes are keyed)
    shown: Finding | None = None

    def line(self) -> str:
        """``path:line:col: CODE verified|rejected|unverified: reason`` (the contract);
        ``path:cell N:line L:col C: ...`` in a notebook, as ``check`` names it. The reason
        is shortened to one readable line (:mod:`gradfix.shorten`; the whole of it is in
        :meth:`to_dict`)."""
        f = self.shown or self.finding
        where = f"cell {f.cell}:line {f.line}:col {f.col}" if f.cell else f"{f.line}:{f.col}"
        return f"{self.path}:{where}: {f.code} {self.status}: {shorten(self.reason)}"

    def to_dict(self) -> dict[str, Any]:
        f = self.shown or self.finding
        return {
            "code": f.code,
            "path": self.path,
            **({"cell": f.cell} if f.cell is not None else {}),
            "line": f.line,
            "col": f.col,
            "verdict": self.status,
            "reason": self.reason,
            "evidence": self.evidence,
            "safety": self.safety,
            "fix": self.description,
        }


def torch_available() -> bool:
    """Verification executes code with torch; static checking never needs it."""
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):  # a broken install, or an import hook refusing it
        return False


def verify_fixes(
    path: str,
    source: str,
    *,
    rules: Sequence[type[Rule]],
    timeout: float = DEFAULT_TIMEOUT,
    seed: int = 0,
    jobs: int = 2,
    entry: str | None = None,
    root: str = ".",
    command: CommandHarness | None = None,
    max_steps: int | None = DEFAULT_MAX_STEPS,
    unsafe: bool = True,
) -> list[FixVerdict]:
    """One verdict per finding that has a fix, each fix proven on its own (see module doc).
    ``unsafe``: judge the fixes marked unsafe too (``fix --write`` without
    ``--unsafe-fixes`` would not apply them). ``max_steps``: both versions stop after that
    many backward calls (None or 0: no limit).

    A file with several bugs often fails again after one fix alone (the next bug raises):
    a fix that is not verified alone is verified *together with the file's other fixes*
    when the file with all its fixes is proven (the reason and evidence say so).

    Raises :class:`gradfix.engine.SourceError` when ``source`` does not parse, or is a
    notebook (not executed yet)."""
    if is_notebook(path):
        from gradfix.notebook_proof import verify_notebook_fixes

        return verify_notebook_fixes(
            path,
            source,
            rules=rules,
            timeout=timeout,
            seed=seed,
            jobs=jobs,
            entry=entry,
            root=root,
            command=command,
            max_steps=max_steps,
            unsafe=unsafe,
        )
    singles = [
        single
        for single in single_fixes(source, rules=rules, path=path)
        if unsafe or single.safety == "safe"
    ]
    if not singles:
        return []
    prove = _Prover(path, source, timeout, seed, entry, root, command, max_steps).prove
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        outcomes = list(pool.map(prove, singles))
    if len(singles) > 1 and any(status != "verified" for status, _, _ in outcomes):
        combined = lint_source(source, rules=rules, path=path, fix=True, unsafe_fixes=unsafe)
        codes = [finding.code for single in singles for finding in single.findings]
        together = prove(SingleFix([], "", "every fix of the file", combined.source), codes)
        if together[0] == "verified":
            outcomes = [_with_others(o, together) for o in outcomes]
    verdicts = [
        FixVerdict(path, finding, status, reason, s.safety, s.description, evidence)
        for s, (status, reason, evidence) in zip(singles, outcomes)
        for finding in s.findings
    ]
    return sorted(verdicts, key=lambda v: (v.finding.line, v.finding.col, v.finding.code))


Outcome = tuple[str, str, dict[str, Any]]


def _with_others(alone: Outcome, together: Outcome, whose: str = "the file's") -> Outcome:
    if alone[0] == "verified":
        return alone
    reason = f"verified together with {whose} other fixes ({together[1]}); alone: {alone[1]}"
    return "verified", reason, {**together[2], "proven": f"with {whose} other fixes"}


def prove_with_project(
    verdicts: list[FixVerdict],
    original: str,
    fixed: str,
    others: dict[str, str],
    **harness: Any,
) -> list[FixVerdict]:
    """Across files: the fixes of one file not verified alone (another file's bug stops
    the program in both versions) are judged again with the file fixed (``fixed``) and
    the project's other files fixed too (``others``: path -> fixed text, seen by the
    fixed version only). When that run is proven, those fixes are verified together
    with the project's other fixes; otherwise their verdicts stay."""
    pending = [v for v in verdicts if v.status != "verified"]
    if not pending or not others:
        return verdicts
    path = pending[0].path
    codes = sorted({v.finding.code for v in verdicts})
    together = prove_change(path, original, fixed, others=others, rules=codes, **harness)
    if together[0] != "verified":
        return verdicts
    return [_together(v, together, "the project's") for v in verdicts]


def _together(verdict: FixVerdict, together: Outcome, whose: str) -> FixVerdict:
    alone = (verdict.status, verdict.reason, verdict.evidence)
    status, reason, evidence = _with_others(alone, together, whose)
    return dataclasses.replace(verdict, status=status, reason=reason, evidence=evidence)


#: Outcomes proven during one run (see :func:`one_run`), else None.
_PROVEN: dict[tuple[Any, ...], Outcome] | None = None
_PROVEN_LOCK = threading.Lock()


@contextlib.contextmanager
def one_run() -> Iterator[None]:
    """Within one ``fix --verify`` run the project does not change, so a change proven
    once is not run again: the accepted fixes of a file together are often the very
    change :func:`verify_fixes` proved with all of them. (Not for a long-lived caller
    such as the language server, whose project changes under it.)"""
    global _PROVEN
    _PROVEN = {}
    try:
        yield
    finally:
        _PROVEN = None


def proven_changes(path: str) -> list[tuple[str, tuple[bool, bool], Outcome]]:
    """(fixed source, (judged by a replay of what it makes train, torch's weights
    checked), outcome) of every change of ``path`` proven so far in this :func:`one_run`
    (for a driver whose files were proven elsewhere: see :func:`remember_proven`)."""
    with _PROVEN_LOCK:
        return [
            (key[2], (key[-2], key[-1]), outcome)
            for key, outcome in (_PROVEN or {}).items()
            if key[0] == path
        ]


def remember_proven(
    path: str,
    original: str,
    proven: Sequence[tuple[str, tuple[bool, bool], Outcome]],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    seed: int = 0,
    entry: str | None = None,
    root: str = ".",
    command: CommandHarness | None = None,
    max_steps: int | None = DEFAULT_MAX_STEPS,
) -> None:
    """Within :func:`one_run`, take the changes of ``path`` a Ray worker proved
    (:func:`proven_changes` there, under the same harness) as proven here, so that the
    driver's final check of a file's accepted fixes together does not run them again."""
    if _PROVEN is None:
        return
    prover = _Prover(path, original, timeout, seed, entry, root, command, max_steps)
    with _PROVEN_LOCK:
        for fixed, flags, outcome in proven:
            _PROVEN.setdefault((*prover._key(fixed), *flags), outcome)


def prove_accepted_together(
    path: str,
    source: str,
    verdicts: Sequence[FixVerdict],
    *,
    rules: Sequence[type[Rule]],
    unsafe_fixes: bool,
    unverified: bool,
    **harness: Any,
) -> None:
    """Prove, within :func:`one_run`, the change ``fix --verify`` checks last for a file
    (its accepted fixes together, when more than one is accepted: see
    ``gradfix.cli.proving``), so that a Ray worker runs it beside the others instead of
    the driver after them (:func:`proven_changes` carries the outcome back)."""
    keys = accepted(verdicts, unverified=unverified)
    if len(keys) < 2:
        return
    lint = lint_source(
        source,
        rules=rules,
        path=path,
        fix=True,
        unsafe_fixes=unsafe_fixes,
        keep=lambda finding: finding_key(finding) in keys,
    )
    if lint.source is not None and lint.source != source:
        codes = sorted({code for _, _, code in keys})
        prove_change(path, source, lint.source, rules=codes, **harness)


@dataclass
class _Prover:
    """Proves candidate sources of one file with the chosen harness."""

    path: str
    source: str
    timeout: float
    seed: int
    entry: str | None
    root: str
    command: CommandHarness | None
    max_steps: int | None = DEFAULT_MAX_STEPS
    others: dict[str, str] = field(default_factory=dict)  # other files, fixed

    def prove(self, single: SingleFix, rules: Sequence[str] = ()) -> Outcome:
        """``rules``: codes of the fix's rules besides those of its findings."""
        if single.source is None:
            return "rejected", "the fix alone breaks the syntax", {}
        codes = tuple(sorted({*rules, *(finding.code for finding in single.findings)}))
        cache = _PROVEN
        if cache is None:
            return self._prove(single, codes)
        from gradfix.registry import fix_intent

        intent = fix_intent(codes)
        strict = intent.restores_gradient
        # a fix declared to change what trains is judged by a replay: another verdict
        key = (*self._key(single.source), intent.changes_training)
        with _PROVEN_LOCK:
            known = cache.get((*key, strict))
            stricter = cache.get((*key, True))
        if known is None and stricter is not None and stricter[0] == "verified":
            known = stricter  # proven with torch's weights checked too: proven without
        if known is None:
            known = self._prove(single, codes)
            with _PROVEN_LOCK:
                cache[(*key, strict)] = known
        return known

    def _key(self, fixed: str) -> tuple[Any, ...]:
        """What the outcome depends on, besides the project's files (unchanged during one
        run); the oracle is deterministic under a seed."""
        texts = sorted(self.others.items())
        harness = (self.timeout, self.seed, self.entry, self.root, id(self.command))
        return (self.path, self.source, fixed, self.max_steps, harness, tuple(texts))

    def _prove(self, single: SingleFix, codes: tuple[str, ...]) -> Outcome:
        status, reason, evidence = self._run(single, codes)
        if status == "unverified":  # say how this project's code can be driven
            from gradfix.verify.drive import explain_unverified

            reason = explain_unverified(reason, evidence, self.path, self.root)
        return status, reason, evidence

    def _run(self, single: SingleFix, codes: tuple[str, ...]) -> Outcome:
        assert single.source is not None
        if self.command is not None:
            verdict = self.command.prove(self.path, single.source, others=self.others)
            return verdict.status, verdict.reason, {**verdict.evidence, "harness": "command"}
        limits = {
            "timeout": self.timeout,
            "seed": self.seed,
            "max_steps": self.max_steps,
            # a fix of a rule that must restore a gradient has torch's weights checked too
            "rules": codes,
        }
        if self.entry is not None:
            patched = {**self.others, self.path: single.source}
            return _prove_entry(self.path, patched, self.entry, self.root, limits)
        return _prove(self.path, self.source, single, dict(limits, others=self.others))


def prove_change(
    path: str,
    original: str,
    fixed: str,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    seed: int = 0,
    entry: str | None = None,
    root: str = ".",
    command: CommandHarness | None = None,
    max_steps: int | None = DEFAULT_MAX_STEPS,
    others: dict[str, str] | None = None,
    rules: Sequence[str] = (),
) -> Outcome:
    """The oracle on a whole change of one file (``fix --verify``'s final check of the
    fixes it is about to write together); ``others``: other files of the project (path ->
    text) that the fixed version sees fixed as well; ``rules``: the codes of the fixes in
    the change (those that must restore a gradient have torch's weights checked too).
    A notebook's change is proven on its joined program (:mod:`gradfix.notebook_proof`)."""
    if is_notebook(path):
        from gradfix.notebook_proof import PROGRAM_SUFFIX, program_source

        path, original, fixed = (
            path + PROGRAM_SUFFIX,
            program_source(original),
            program_source(fixed),
        )
    prover = _Prover(
        path, original, timeout, seed, entry, root, command, max_steps, dict(others or {})
    )
    return prover.prove(SingleFix([], "", "the accepted fixes", fixed), rules)


def _prove(path: str, source: str, single: SingleFix, limits: dict[str, Any]) -> Outcome:
    assert single.source is not None
    from gradfix.verify import verify_sources
    from gradfix.verify.harness import probe_for

    directory = os.path.dirname(os.path.abspath(path))
    others = _inside(limits.pop("others", {}), directory)

    def run(before: str, after: str, harness: str) -> tuple[str, str, dict[str, Any]]:
        verdict = verify_sources(
            before,
            after,
            filename=os.path.basename(path) or "snippet.py",
            source_dir=directory,
            patched=others,
            **limits,
        )
        return verdict.status, verdict.reason, {**verdict.evidence, "harness": harness}

    status, reason, evidence = run(source, single.source, "the file run as a script")
    if status != "unverified" or not reason.startswith(NOTHING_TO_COMPARE):
        return status, reason, evidence
    # The file only defines the code around the fix: drive it through the project's
    # scripts that import it (as the user runs it), else with a probe.
    driven_by = [
        _prove_through(script, path, single.source, others, dict(limits))
        for script in importing_scripts(path)
    ]
    # each script may meet the project's other bugs: a proof through one stands, and a
    # run another bug blocks is less misleading than a rejection another bug may cause
    for wanted in ("verified", "unverified", "rejected"):
        for driven in driven_by:
            if driven[0] == wanted and not driven[1].startswith(NOTHING_TO_COMPARE):
                return driven
    lines = [finding.line for finding in single.findings] or _changed_lines(source, single.source)
    probe = probe_for(source, lines[0]) if lines else None
    if probe is None:
        return status, reason, evidence
    return run(source + probe.code, single.source + probe.code, f"probe: {probe.description}")


def importing_scripts(path: str) -> list[str]:
    """The scripts beside ``path`` that import it and run as a program (an ``if __name__
    == "__main__":`` block, or a flat script: a call or a loop at its top level): the
    project's own entry points into that module."""
    import re

    from gradfix.verify.drive import runs_as_program

    directory = os.path.dirname(os.path.abspath(path))
    module = os.path.splitext(os.path.basename(path))[0]
    imports = re.compile(rf"^\s*(?:import|from)\s+{re.escape(module)}\b", re.MULTILINE)
    found = []
    for name in sorted(os.listdir(directory)):
        candidate = os.path.join(directory, name)
        if not name.endswith(".py") or candidate == os.path.abspath(path):
            continue
        try:
            with open(candidate, encoding="utf-8") as handle:
                text = handle.read()
            tree = pyast.parse(text)
        except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
            continue
        if imports.search(text) and runs_as_program(tree):
            found.append(candidate)
    return found


def _prove_through(
    script: str, path: str, fixed: str, others: dict[str, str], limits: dict[str, Any]
) -> Outcome:
    """Run ``script`` (which imports ``path``) as it is, and with ``path`` fixed (and the
    project's other fixes, the script's own among them) swapped in."""
    from gradfix.verify import verify_sources

    directory = os.path.dirname(os.path.abspath(script))
    with open(script, encoding="utf-8") as handle:
        text = handle.read()
    patched = {**others, os.path.relpath(os.path.abspath(path), directory): fixed}
    own = patched.pop(os.path.basename(script), text)
    verdict = verify_sources(
        text,
        own,
        filename=os.path.basename(script),
        source_dir=directory,
        patched=patched,
        **limits,
    )
    harness = f"run through {os.path.basename(script)}, which imports it"
    return verdict.status, verdict.reason, {**verdict.evidence, "harness": harness}


def _inside(files: dict[str, str], directory: str) -> dict[str, str]:
    """``files`` (path -> text) under ``directory``, by path relative to it (a script sees
    its own directory: files elsewhere are not where it imports them from)."""
    found = {}
    for path, text in files.items():
        relative = os.path.relpath(os.path.abspath(path), directory)
        if not relative.startswith(os.pardir + os.sep):
            found[relative] = text
    return found


def _changed_lines(before: str, after: str) -> list[int]:
    """1-based lines of ``before`` that ``after`` changes (where to aim a probe)."""
    import difflib

    matcher = difflib.SequenceMatcher(None, before.splitlines(), after.splitlines())
    return [i1 + 1 for tag, i1, _, _, _ in matcher.get_opcodes() if tag != "equal"]


def _prove_entry(
    path: str, patched: dict[str, str], entry: str, root: str, limits: dict[str, Any]
) -> Outcome:
    """Run the user's entry point on the tree as it is and with the fixed files (``path``
    and the project's others in ``patched``) swapped in."""
    from gradfix.verify import verify_sources
    from gradfix.verify.harness import entry_driver

    before = entry_driver(entry, root, path, None)
    after = entry_driver(entry, root, path, patched)
    verdict = verify_sources(
        before, after, filename="gradfix_entry.py", source_dir=os.path.abspath(root), **limits
    )
    return verdict.status, verdict.reason, {**verdict.evidence, "harness": f"entry {entry}"}


def verify_baseline(
    old_path: str, new_path: str, *, timeout: float = DEFAULT_TIMEOUT, seed: int = 0
) -> tuple[str, str, dict[str, Any]]:
    """The oracle on a refactor made by hand: NEW must keep OLD's forward results and
    give correct finite gradients. Returns ``(status, reason, evidence)``."""
    from gradfix.verify import verify_files
    from gradfix.verify.intent import FixIntent

    # a change made by hand declares nothing: it may make other leaves train, or stop
    # making throw-away leaves, as a fix of a rule that declares it may
    verdict = verify_files(
        old_path, new_path, timeout=timeout, seed=seed, intent=FixIntent.unknown()
    )
    return verdict.status, verdict.reason, verdict.evidence


def accepted(verdicts: Sequence[FixVerdict], *, unverified: bool) -> set[tuple[int, int, str]]:
    """The findings whose fix may be applied by ``fix --verify``: verified ones, and
    unverified ones when ``unverified`` (``--unsafe-fixes``). Rejected fixes never."""
    keys = {finding_key(v.finding) for v in verdicts if may_apply(v.status, unverified=unverified)}
    refused = {
        finding_key(v.finding) for v in verdicts if not may_apply(v.status, unverified=unverified)
    }
    return keys - refused


def may_apply(status: str, *, unverified: bool) -> bool:
    """A fix with this verdict may be applied: verified, or unverified when ``unverified``
    (``--unsafe-fixes``); rejected never."""
    return status == "verified" or (unverified and status == "unverified")


def finding_key(finding: Finding) -> tuple[int, int, str]:
    """How ``fix --verify`` matches a finding to its verdict (position on the original)."""
    return (finding.line, finding.col, finding.code)
