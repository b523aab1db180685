"""The project as the script sees it, and the sandbox each run executes in.

A script reads ``data/train.pt`` or ``configs/run.yaml`` relative to its own directory (or
``Path(__file__).parent``), so each runner's working directory is a *mirror* of the
project (:func:`mirror_project`, parent side, no torch): the project's directories made
anew, its files as symbolic links to the originals. Reads see the project; a new file
(a checkpoint, a log) lands in the mirror, which is deleted afterwards.

The runner then confines itself (:func:`confine`, before the script's first line): the OS
sandbox where the machine has one (:mod:`.namespaces`: everything read-only but the
mirror and a temp dir, the project under an overlay that records what changed in it, the
verifier's directories hidden, no network), and the audit-hook guard always
(:mod:`.guard`: a write to a mirrored file makes a private copy first; any other change
of the project is refused and recorded). After the run the parent reads what the program
tried (:func:`read_report`) and :func:`contain` keeps a run that tried from being
"verified"; the evidence names the sandbox that ran (``namespaces`` / ``audit hooks``).

    mirror_project("/home/me/proj", work_dir)     # parent, before the runner starts
    confine(spec)                                 # runner, before the script runs
    verdict = contain(verdict, {"before": read_report(job), ...})   # parent, after
"""

from __future__ import annotations

import json
import os
import stat
from glob import glob
from pathlib import Path
from typing import Any

#: Directories and files made in a mirror at most; deeper trees are linked whole (read only).
MIRROR_LIMIT = 2000
#: Never mirrored entry by entry: tool state and environments (still readable, linked whole).
LINKED_WHOLE = frozenset({
    ".git", ".hg", ".svn", ".venv", "venv", "env", "node_modules", "__pycache__",
    ".gradfix_cache", ".mypy_cache", ".ruff_cache", ".pytest_cache", ".tox",
})  # fmt: skip
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


def mirror_project(project: str | os.PathLike[str], work: Path) -> None:
    """Fill the empty directory ``work`` with the tree of ``project`` (links to files)."""
    budget = [MIRROR_LIMIT]
    _mirror_dir(Path(os.path.abspath(project)), work, budget)


def place_file(work: Path, relative: str, text: str) -> None:
    """Write ``text`` at ``relative`` in the mirror ``work``, instead of the project's file
    (the link, or a directory linked whole, is replaced; never written through)."""
    target = work
    for part in Path(relative).parts[:-1]:
        target = target / part
        if target.is_symlink():  # a directory linked whole: made real, one level down
            original = Path(os.readlink(target))
            target.unlink()
            target.mkdir()
            _mirror_dir(original, target, [MIRROR_LIMIT])
        target.mkdir(exist_ok=True)
    target = target / Path(relative).name
    if target.is_symlink():
        target.unlink()
    target.write_text(text, encoding="utf-8")


def _mirror_dir(source: Path, target: Path, budget: list[int]) -> None:
    try:
        entries = sorted(os.scandir(source), key=lambda e: e.name)
    except OSError:
        return  # unreadable: the script gets the same error as in the project
    for entry in entries:
        link = target / entry.name
        budget[0] -= 1
        mirrored = budget[0] > 0 and entry.name not in LINKED_WHOLE
        if mirrored and entry.is_dir(follow_symlinks=False):
            link.mkdir()
            _mirror_dir(Path(entry.path), link, budget)
            continue
        try:
            os.symlink(entry.path, link)
        except OSError:
            continue


# ---------------------------------------------------------------- the runner's sandbox
#: ``GRADFIX_SANDBOX=hooks``: the audit-hook guard alone, even where the OS sandbox works
SANDBOX_ENV = "GRADFIX_SANDBOX"
OS_SANDBOX = "namespaces"
HOOKS = "audit hooks"


def sandbox_mode() -> str:
    """``auto`` (the OS sandbox where the machine has one) or ``hooks``."""
    return "hooks" if os.environ.get(SANDBOX_ENV, "auto") == "hooks" else "auto"


def prepare_job(job: Path, project: str | None) -> dict[str, Any]:
    """Parent side: the job's directories the sandbox needs, and the spec's ``sandbox``
    entry (``hide``: the verifier's private directories, as glob patterns)."""
    (job / "tmp").mkdir()
    if project is not None:
        (job / "upper").mkdir()
        (job / "overlay-work").mkdir()
    return {"job": str(job), "mode": sandbox_mode(), "hide": []}


def confine(spec: dict[str, Any]) -> str:
    """Runner side, before the script runs: the OS sandbox when it can be entered, and the
    audit-hook guard always (:mod:`.guard`); returns which sandbox holds the run."""
    from gradfix.verify.guard import Guard, install_guard, record

    box = spec.get("sandbox") or {}
    job = Path(box.get("job") or os.path.dirname(spec["cwd"]))
    project = os.path.realpath(spec["project"]) if spec.get("project") else ""
    log_fd = os.open(job / "attempts.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    hidden = sorted({os.path.realpath(p) for pattern in box.get("hide", []) for p in glob(pattern)})
    kind, detail = HOOKS, "the OS sandbox was not asked for"
    if box.get("mode", "auto") != "hooks":
        from gradfix.verify.namespaces import enter_namespaces

        try:
            detail = f"project {enter_namespaces(job, spec['cwd'], project, hidden)}"
            kind = OS_SANDBOX
        except OSError as error:
            detail = f"no OS sandbox here ({error})"
    _private_temp_dir(str(job / "tmp"))
    guard = Guard(
        project=project,
        writable=(os.path.realpath(spec["cwd"]), os.path.realpath(job / "tmp")),
        hidden=tuple(hidden),
        own_socket=spec.get("socket", ""),
        isolated=kind == OS_SANDBOX,
        log_fd=log_fd,
    )
    record(guard, {"sandbox": kind, "detail": detail})
    install_guard(guard)
    return kind


def _private_temp_dir(path: str) -> None:
    import tempfile

    for name in ("TMPDIR", "TEMP", "TMP"):
        os.environ[name] = path
    tempfile.tempdir = path


# ---------------------------------------------------------------- after the run
def read_report(job: Path, upper_stamp: tuple[int, int] | None = None) -> dict[str, Any]:
    """Parent side, after the run: which sandbox ran and what the program tried
    (``attempts``: on the project or the verifier; ``outside``: writes elsewhere, blocked)
    -- from the guard's log and from the overlay's upper layer (what a process, a libc call
    or anything else past the guard changed in the project)."""
    report: dict[str, Any] = {"sandbox": None, "attempts": [], "outside": []}
    try:
        lines = (job / "attempts.jsonl").read_text(encoding="utf-8", errors="replace")
    except OSError:
        lines = ""
    for line in lines.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if not isinstance(entry, dict):
            continue
        if "sandbox" in entry and report["sandbox"] is None:
            report["sandbox"] = str(entry["sandbox"])
            report["detail"] = str(entry.get("detail"))
        elif entry.get("kind") == "outside":
            report["outside"].append(str(entry.get("what")))
        elif "kind" in entry:
            report["attempts"].append(str(entry.get("what")))
    report["attempts"] += changed_in_overlay(job / "upper", upper_stamp)
    return report


def upper_stamp(job: Path) -> tuple[int, int] | None:
    """The overlay's upper directory as made (a chmod or utime of the project's own
    directory changes only it)."""
    try:
        info = (job / "upper").lstat()
    except OSError:
        return None
    return info.st_mode, info.st_mtime_ns


def changed_in_overlay(upper: Path, stamp: tuple[int, int] | None = None) -> list[str]:
    """What the run changed in the project, as the overlay recorded it in ``upper``."""
    if not upper.is_dir():
        return []
    changes = []
    for path in sorted(upper.rglob("*")):
        relative = str(path.relative_to(upper))
        info = path.lstat()
        deleted = stat.S_ISCHR(info.st_mode) and info.st_rdev == 0  # a whiteout
        what = "deleted" if deleted else "created or changed"
        changes.append(f"{what} {relative!r} in the project (seen by the sandbox's overlay)")
    if not changes and stamp is not None and upper_stamp(upper.parent) != stamp:
        changes.append("changed the project directory's mode or times (seen by the overlay)")
    return changes


def contain(verdict: Any, reports: dict[str, dict[str, Any]]) -> Any:
    """The verdict given what the runs tried: never "verified" after an attempt on the
    project or the verifier; the evidence names the sandbox that ran."""
    kinds = sorted({r["sandbox"] for r in reports.values() if r.get("sandbox")})
    verdict.evidence["sandbox"] = ", ".join(kinds) or "none"
    details = sorted({str(r.get("detail")) for r in reports.values() if r.get("detail")})
    if details:
        verdict.evidence["sandbox_detail"] = "; ".join(details)
    attempts = list(
        dict.fromkeys((source, a) for source, r in reports.items() for a in r.get("attempts", []))
    )  # each execution of a run repeats them
    outside = list(dict.fromkeys(a for r in reports.values() for a in r.get("outside", [])))
    if outside:
        verdict.evidence["blocked_outside"] = outside[:20]
    if not attempts:
        return verdict
    verdict.evidence["attempts"] = [f"{source}: {a}" for source, a in attempts[:50]]
    source, first = attempts[0]
    tried = (
        "the program tried to change what it must not, so its run proves nothing; "
        f"sandbox: {verdict.evidence['sandbox']}; {len({a for _, a in attempts})} attempt(s), "
        f"the first ({source}): {first}"
    )
    if verdict.status == "rejected":
        verdict.reason = f"{verdict.reason}; and {tried}"
        return verdict
    verdict.status = "unverified"
    verdict.reason = f"{tried}; the comparison alone: {verdict.reason}"
    return verdict
