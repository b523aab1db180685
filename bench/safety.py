"""Running users' code safely (issue 33): what a hostile program gets through the verifier.

    python bench/safety.py                 # every figure (about 2 minutes)
    python bench/safety.py --sandbox hooks # the audit-hook fallback alone (no OS sandbox)

The hostile script (``tests/data/hostile/train.py``) tries 23 ways to change its project,
its machine or the verifier (open for write, ``os.open`` with ``dir_fd``, ``os.system``,
``subprocess``, libc ``open`` through ``ctypes``, ``mkdir``, hard and symbolic links,
rename, remove, ``rmtree``, ``chmod``, ``utime``, ``truncate``, ``posix_spawn``, writes in
the home directory and beside the project, a request to the warm verifier's socket...) and
has one fixable bug. It is copied to a temporary project and run through
``gradfix fix --write`` as a user would (a new process, the warm verifier on, ``HOME`` a
temporary directory). Printed: the attempts blocked (an attempt got through when one of the
files it aims at changed: existence, type, mode, times, size, links, content), the verdict
(must not be "verified"), the files changed in the project besides the fix (must be 0),
and which sandbox ran.

The other figures of the issue, each a function below, measured on temporary copies of
``fixtures/*/*.before.py``: the kill trials (``fix --write --no-verify -j 2`` SIGKILLed
at 1-4 s: torn files, stray temporaries, processes of its session left 10 s later), the
cache poisoning (entries edited 9 ways, then ``fix --write --no-verify``: files written
with the injected text, tracebacks, internal errors; a control signed with the user's own
secret shows the measure sees such a write) and the fuzz corpus (seeded mutations of the
fixtures and inputs made from nothing through ``check`` and ``fix --write --no-verify``:
tracebacks, internal errors, line endings changed on the lines a fix left alone).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HOSTILE = Path(__file__).resolve().parent.parent / "tests" / "data" / "hostile"
HOME_MARK = "~home/gradfix-hostile-home.txt"
SIBLING_MARK = "~sibling/gradfix-hostile-sibling.txt"
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
#: each attempt of the hostile script and the files it aims at (relative to the project;
#: the two marks: in the home directory, beside the project)
EFFECTS: dict[str, tuple[str, ...]] = {
    "open for writing": ("evil_open.txt",),
    "os.open with dir_fd": ("evil_dirfd.txt",),
    "os.system": ("evil_system.txt",),
    "subprocess": ("evil_subprocess.txt",),
    "ctypes libc open": ("evil_ctypes.txt",),
    "os.mkdir": ("evil_dir",),
    "os.link": ("evil_hardlink.txt", "victim_link.txt"),
    "os.symlink": ("evil_symlink",),
    "os.rename": ("victim_rename.txt", "evil_renamed.txt"),
    "os.remove": ("victim_remove.txt",),
    "pathlib unlink": ("victim_unlink.txt",),
    "shutil.rmtree": ("victim_dir", "victim_dir/inner.txt"),
    "os.chmod": ("victim_chmod.txt",),
    "os.utime": ("victim_utime.txt",),
    "os.truncate": ("victim_truncate.txt",),
    "pathlib write_text": ("evil_pathlib.txt",),
    "os.system rm": ("victim_system_rm.txt",),
    "os.replace": ("victim_replace.txt",),
    "torch.save": ("evil_torch.pt",),
    "posix_spawn": ("evil_spawn.txt",),
    "write in the home directory": (HOME_MARK,),
    "write beside the project": (SIBLING_MARK,),
    "the verifier's socket": ("evil_socket_stdout.txt", "evil_socket_stderr.txt"),
}


@dataclass
class HostileRun:
    """What the hostile script got through one gradfix command."""

    through: list[str]  # the attempts that changed what they aimed at
    changed: list[str]  # files of the project changed, the fixed script excepted
    status: str  # the verdict of its fix (verified / rejected / unverified / none)
    sandbox: str
    returncode: int
    output: str
    fixed: bool  # the script's bug was fixed in the project
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def blocked(self) -> int:
        return len(EFFECTS) - len(self.through)


def make_project(base: Path) -> tuple[Path, Path]:
    """A copy of the hostile project in ``base/work/project`` and a home directory."""
    project = base / "work" / "project"
    shutil.copytree(HOSTILE, project)
    (project / "HOSTILE_COPY").write_text("the hostile script runs only here\n", encoding="utf-8")
    home = base / "home"
    home.mkdir()
    return project, home


def state(path: Path) -> tuple[Any, ...] | None:
    """What an attempt on ``path`` could change (None: it does not exist)."""
    try:
        info = path.lstat()
    except OSError:
        return None
    digest = ""
    if path.is_file() and not path.is_symlink():
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return (info.st_mode, info.st_mtime_ns, info.st_size, info.st_nlink, digest)


def snapshot(project: Path, home: Path) -> dict[str, tuple[Any, ...] | None]:
    """Every file of the project, and every file an attempt aims at."""
    found: dict[str, tuple[Any, ...] | None] = {}
    for path in sorted(project.rglob("*")):
        found[str(path.relative_to(project))] = state(path)
    for targets in EFFECTS.values():
        for target in targets:
            found[target] = state(resolve(target, project, home))
    return found


def resolve(target: str, project: Path, home: Path) -> Path:
    if target.startswith("~home/"):
        return home / target.split("/", 1)[1]
    if target.startswith("~sibling/"):
        return project.parent / target.split("/", 1)[1]
    return project / target


def run_hostile(
    command: str, base: Path, *, sandbox: str = "auto", runtime: Path | None = None
) -> HostileRun:
    """``gradfix COMMAND`` (``verify`` or ``fix --write``) on the hostile project copied
    under ``base``; ``sandbox="hooks"``: the audit-hook fallback alone."""
    import json

    project, home = make_project(base)
    before = snapshot(project, home)
    original = (project / "train.py").read_text(encoding="utf-8")
    environ = dict(os.environ, HOME=str(home), GRADFIX_NO_CACHE="1", GRADFIX_SANDBOX=sandbox)
    if runtime is not None:
        environ["XDG_RUNTIME_DIR"] = str(runtime)
    json_output = command == "verify"
    args = [*command.split(), *(["--format", "json"] if json_output else []), "train.py"]
    result = subprocess.run(
        [sys.executable, "-m", "gradfix", *args],
        cwd=project,
        env=environ,
        capture_output=True,
        text=True,
        timeout=600,
    )
    after = snapshot(project, home)
    through = [
        name for name, targets in EFFECTS.items() if any(before[t] != after[t] for t in targets)
    ]
    changed = sorted(
        name for name in set(before) | set(after)
        if before.get(name) != after.get(name) and name != "train.py" and not name.startswith("~")
    )  # fmt: skip
    if json_output:
        verdict = find_verdict(json.loads(result.stdout or "null"))
    else:
        verdict = verdict_of_line(result.stderr + result.stdout)
    fixed = (project / "train.py").read_text(encoding="utf-8") != original
    return HostileRun(
        through=through,
        changed=changed,
        status=str(verdict.get("status", "none")),
        sandbox=str(verdict.get("evidence", {}).get("sandbox", "none")),
        returncode=result.returncode,
        output=result.stdout + result.stderr,
        fixed=fixed,
        details=verdict,
    )


def verdict_of_line(output: str) -> dict[str, Any]:
    """The verdict in ``path:line:col: CODE status: reason`` (``fix`` prints it)."""
    import re

    match = re.search(r"train\.py:\d+:\d+: GF\d+ (verified|rejected|unverified): (.*)", output)
    if match is None:
        return {}
    sandbox = re.search(r"sandbox: ([^;)]+)", match[2])
    evidence = {"sandbox": sandbox[1]} if sandbox else {}
    return {"status": match[1], "reason": match[2], "evidence": evidence}


def find_verdict(report: Any) -> dict[str, Any]:
    """The verdict of the fix in ``gradfix verify`` / ``fix --format json`` output."""
    if isinstance(report, dict):
        if "verdict" in report and "reason" in report:  # a FixVerdict's to_dict()
            return dict(report, status=report["verdict"])
        for value in report.values():
            found = find_verdict(value)
            if found:
                return found
    if isinstance(report, list):
        for value in report:
            found = find_verdict(value)
            if found:
                return found
    return {}


def hostile_figures(sandbox: str) -> list[str]:
    with tempfile.TemporaryDirectory(prefix="gradfix-safety-") as base:
        run = run_hostile("fix --write", Path(base), sandbox=sandbox)
    lines = [
        f"hostile script through `gradfix fix --write` (sandbox asked: {sandbox})",
        f"  attempts blocked          {run.blocked} / {len(EFFECTS)}",
        f"  verdict                   {run.status} (sandbox: {run.sandbox})",
        f"  project files changed     {len(run.changed)} besides the fix"
        + (f": {', '.join(run.changed)}" if run.changed else ""),
        f"  fix written               {'yes' if run.fixed else 'no'} (exit {run.returncode})",
    ]
    if run.through:
        lines.append(f"  got through               {', '.join(run.through)}")
    if run.details.get("reason"):
        lines.append(f"  reason                    {str(run.details['reason'])[:300]}")
    return lines


def gradfix_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "gradfix", *args]


def fixture_sources(limit: int | None = None) -> list[str]:
    """The texts of ``fixtures/*/*.before.py`` (sorted by path; the first ``limit``)."""
    paths = sorted(FIXTURES.glob("*/*.before.py"))[:limit]
    return [path.read_text(encoding="utf-8") for path in paths]


def fixed_texts(sources: list[str], base: Path, environ: dict[str, str]) -> list[str]:
    """Each source as ``gradfix fix --write --no-verify`` leaves it, uninterrupted."""
    reference = base / "reference"
    reference.mkdir()
    for index, text in enumerate(sources):
        (reference / f"m{index}.py").write_text(text, encoding="utf-8")
    command = gradfix_command("fix", "--write", "--no-verify", "--no-cache", "-j", "1", "-q")
    subprocess.run(
        [*command, "."], cwd=reference, env=environ, capture_output=True, timeout=600, check=False
    )
    return [(reference / f"m{i}.py").read_text(encoding="utf-8") for i in range(len(sources))]


def session_processes(session: int, marker: str) -> list[int]:
    """Live processes of the session ``session`` or whose command line names ``marker``
    (read from ``/proc``; zombies, gone already but for their parent's wait, excepted)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if stat[0] != "Z" and (int(stat[3]) == session or marker in command):
            found.append(int(entry.name))
    return found


@dataclass
class KillTrial:
    delay: float
    workers: int  # processes of the run besides the main one when it was killed
    written: int  # files already fixed when the main process was killed
    torn: list[str]  # files neither the original nor the fixed text, or not compiling
    stray: list[str]  # files in the project that were not there before (temporaries)
    left: int  # processes of the run alive 10 s after the kill
    gone_after: float  # seconds until the last of them ended (10 s: some never did)


def kill_trial(
    delay: float, sources: list[str], fixed: list[str], base: Path, environ: dict[str, str],
    copies: int = 3,
) -> KillTrial:  # fmt: skip
    """``fix --write --no-verify -j 2`` on ``copies`` copies of ``sources``, SIGKILLed
    ``delay`` seconds after it started."""
    import ast
    import signal
    import time

    project = base / f"kill-{delay:g}"
    project.mkdir()
    expected: dict[str, tuple[str, str]] = {}
    for copy in range(copies):
        for index, text in enumerate(sources):
            name = f"c{copy}_m{index}.py"
            (project / name).write_text(text, encoding="utf-8")
            expected[name] = (text, fixed[index])
    process = subprocess.Popen(
        gradfix_command("fix", "--write", "--no-verify", "--no-cache", "-j", "2", str(project)),
        cwd=project, env=environ, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    time.sleep(delay)
    workers = len(session_processes(process.pid, str(project))) - 1  # the main one excepted
    process.send_signal(signal.SIGKILL)
    process.wait()
    killed = time.monotonic()
    left = session_processes(process.pid, str(project))
    while left and time.monotonic() - killed < 10:
        time.sleep(0.1)
        left = session_processes(process.pid, str(project))
    gone_after = time.monotonic() - killed
    for pid in left:  # not left to the machine
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    written, torn = 0, []
    for name, (original, after) in expected.items():
        text = (project / name).read_text(encoding="utf-8", errors="surrogateescape")
        try:
            ast.parse(text)
        except (SyntaxError, ValueError):
            torn.append(name)
            continue
        if text not in (original, after):
            torn.append(name)
        written += text != original
    stray = sorted(p.name for p in project.iterdir() if p.name not in expected)
    return KillTrial(delay, workers, written, torn, stray, len(left), gone_after)


def kill_trials(delays: tuple[float, ...] = (1.0, 2.0, 3.0, 4.0), copies: int = 3) -> list[str]:
    """SIGKILL during ``fix --write -j 2``: torn files, processes left (issue 33, item 3)."""
    if not Path("/proc/self/stat").exists():
        return ["kill trials                 not measured: no /proc on this system"]
    sources = fixture_sources()
    with tempfile.TemporaryDirectory(prefix="gradfix-kill-") as folder:
        base = Path(folder)
        environ = dict(os.environ, XDG_CACHE_HOME=str(base / "xdg"), GRADFIX_NO_CACHE="1")
        fixed = fixed_texts(sources, base, environ)
        trials = [kill_trial(d, sources, fixed, base, environ, copies) for d in delays]
    files = copies * len(sources)
    lines = [
        f"kill trials: `fix --write --no-verify -j 2` on {files} files, SIGKILL of the main "
        f"process after {', '.join(f'{t.delay:g}' for t in trials)} s",
        f"  trials                    {len(trials)}",
        f"  other processes at kill   {', '.join(str(t.workers) for t in trials)}",
        f"  files written when killed {', '.join(str(t.written) for t in trials)} (of {files})",
        f"  torn files                {sum(len(t.torn) for t in trials)}",
        f"  stray temporary files     {sum(len(t.stray) for t in trials)}",
        f"  processes left after 10 s {sum(t.left for t in trials)}"
        f" (all gone within {max(t.gone_after for t in trials):.1f} s)",
    ]
    torn = [name for t in trials for name in t.torn + t.stray]
    if torn:
        lines.append(f"  torn or stray             {', '.join(torn[:10])}")
    return lines


MARKER = "__import__('os').system('echo poisoned')  # GRADFIX-POISON"


def _poison_entry(payload: dict[str, Any], how: str, other: dict[str, Any]) -> dict[str, Any]:
    """``payload`` (a cache entry) edited as ``how`` says; ``other``: another file's entry."""
    import copy

    entry = copy.deepcopy(payload)
    fixes = entry.get("fixes", {}).get("safe") or {}
    if how in ("unsigned edit", "another secret", "unsigned layout", "another source", "codes"):
        fixes["text"] = MARKER + "\n" + str(fixes.get("text") or "")
    if how == "another source":
        entry["source"] = other["source"]
    elif how == "codes":
        for finding in entry["findings"]:
            finding["code"] = "GF999"
    elif how == "wrong types":
        for finding in entry["findings"]:
            finding.update(line="1", col=True, end_line=-3, message=None, fix=["safe"])
        fixes.update(text=["x = 1"], remaining={"a": 1}, dropped="no", applied="2")
    elif how == "deep nesting":
        entry["findings"] = "DEEP"
    elif how == "signed control":
        fixes["text"] = MARKER + "\n" + str(fixes.get("text") or "")
    return entry


#: the ways entries are poisoned, and whether the edited entry is signed again with the
#: user's secret (as only gradfix can: these test the checks behind the signature)
POISONS: dict[str, bool] = {
    "unsigned edit": False,  # the fixed text edited, the digest left as it was
    "another secret": False,  # signed again with another user's secret
    "unsigned layout": False,  # no envelope: the bare entry
    "truncated": False,  # the file cut in half
    "swapped": False,  # the entry of another file, as it was written
    "another source": True,  # signed, but computed from another file's text
    "codes": True,  # signed, with codes no rule has
    "wrong types": True,  # signed, every field of the wrong type
    "deep nesting": True,  # signed, a payload nested 100,000 levels
}


def _sign(secret: bytes, name: str, payload: str) -> str:
    import hmac

    message = f"{name}\0{payload}".encode("utf-8", "surrogatepass")
    digest = hmac.new(secret, message, hashlib.sha256).hexdigest()
    return json.dumps({"gradfix_cache": 2, "digest": digest, "payload": payload})


def poison_cache(cache: Path, how: str, secret: bytes, signed: bool) -> int:
    """Poison every entry of ``cache`` that holds a fixed text; the number poisoned."""
    entries = sorted(p for p in cache.glob("*/*.json"))
    loaded = {}
    for path in entries:
        envelope = json.loads(path.read_text(encoding="utf-8"))
        payload = json.loads(envelope["payload"])
        if (payload.get("fixes", {}).get("safe") or {}).get("text"):
            loaded[path] = (envelope, payload)
    paths = list(loaded)
    for index, path in enumerate(paths):
        envelope, payload = loaded[path]
        other_path = paths[(index + 1) % len(paths)]
        other = loaded[other_path][1]
        if how == "truncated":
            text = path.read_text(encoding="utf-8")
            path.write_text(text[: len(text) // 2], encoding="utf-8")
            continue
        if how == "swapped":
            shutil.copyfile(other_path, path.with_suffix(".swap"))
            continue
        entry = json.dumps(_poison_entry(payload, how, other))
        if how == "deep nesting":
            entry = entry.replace('"DEEP"', "[" * 100_000 + "]" * 100_000)
        if signed:
            text = _sign(secret, path.stem, entry)
        elif how == "another secret":
            text = _sign(os.urandom(32), path.stem, entry)
        elif how == "unsigned layout":
            text = entry
        else:
            text = json.dumps(dict(envelope, payload=entry))
        path.write_text(text, encoding="utf-8")
    for swap in cache.glob("*/*.swap"):
        swap.replace(swap.with_suffix(".json"))
    return len(paths)


@dataclass
class PoisonRun:
    how: str
    entries: int  # entries poisoned
    poisoned: list[str]  # files written with the marker, or text neither theirs nor fixed
    errors: int  # tracebacks and internal errors in the output
    returncode: int


def poison_run(
    how: str, signed: bool, sources: list[str], fixed: list[str], base: Path,
    environ: dict[str, str],
) -> PoisonRun:  # fmt: skip
    """A project whose cache was filled by ``gradfix fix``, poisoned as ``how``, then
    ``fix --write --no-verify``."""
    project = base / how.replace(" ", "-")
    project.mkdir()
    for index, text in enumerate(sources):
        (project / f"m{index}.py").write_text(text, encoding="utf-8")
    command = gradfix_command("fix", "--no-verify", "-j", "1")
    subprocess.run([*command, "."], cwd=project, env=environ, capture_output=True, timeout=600)
    secret = (Path(environ["XDG_CACHE_HOME"]) / "gradfix" / "cache-secret").read_bytes()
    entries = poison_cache(project / ".gradfix_cache", how, secret, signed)
    command = gradfix_command("fix", "--write", "--no-verify", "-j", "1")
    result = subprocess.run(
        [*command, "."], cwd=project, env=environ, capture_output=True, text=True, timeout=600
    )
    output = result.stdout + result.stderr
    poisoned = []
    for index, text in enumerate(sources):
        written = (project / f"m{index}.py").read_text(encoding="utf-8")
        if MARKER in written or written not in (text, fixed[index]):
            poisoned.append(f"m{index}.py")
    errors = output.count("Traceback") + output.count("internal error")
    return PoisonRun(how, entries, poisoned, errors, result.returncode)


def cache_poisoning(files: int = 12) -> list[str]:
    """Edited cache entries: writes of poisoned text (issue 33, item 4)."""
    with tempfile.TemporaryDirectory(prefix="gradfix-cache-") as folder:
        base = Path(folder)
        environ = dict(os.environ, XDG_CACHE_HOME=str(base / "xdg"))
        environ.pop("GRADFIX_NO_CACHE", None)
        everything = fixture_sources()
        reference = fixed_texts(everything, base, environ)
        chosen = [i for i, text in enumerate(everything) if reference[i] != text][:files]
        sources, fixed = [everything[i] for i in chosen], [reference[i] for i in chosen]
        runs = [poison_run(how, s, sources, fixed, base, environ) for how, s in POISONS.items()]
        control = poison_run("signed control", True, sources, fixed, base, environ)
    entries = sum(run.entries for run in runs)
    lines = [
        f"cache poisoning: {len(runs)} ways, {entries} entries poisoned in all "
        f"({len(sources)} files with fixes), then `fix --write --no-verify`",
        f"  poisoned writes           {sum(len(run.poisoned) for run in runs)}",
        f"  tracebacks, internal errors {sum(run.errors for run in runs)}",
        f"  runs that exited 2        {sum(run.returncode == 2 for run in runs)}",
        f"  control: the marker in an entry signed as gradfix signs, from the same source: "
        f"written to {len(control.poisoned)} of {control.entries} files (what a stolen "
        "secret would get; the signature is the boundary)",
    ]
    for run in runs:
        if run.poisoned or run.errors or run.returncode == 2 or not run.entries:
            lines.append(
                f"  {run.how}: {run.entries} entries, poisoned {', '.join(run.poisoned) or '-'}, "
                f"{run.errors} errors, exit {run.returncode}"
            )
    return lines


def mutations(source: bytes, rng: Any) -> dict[str, bytes]:
    """The mutants of one fixture's bytes (``rng``: a seeded ``random.Random``)."""
    lines = source.split(b"\n")
    position = rng.randrange(max(1, len(source)))
    flipped = bytearray(source)
    if flipped:
        flipped[position] ^= 1 << rng.randrange(8)
    mixed = b"".join(line + rng.choice((b"\n", b"\r\n", b"\r")) for line in lines[:-1]) + lines[-1]
    return {
        "flip": bytes(flipped),
        "truncated": source[: rng.randrange(max(1, len(source)))],
        "crlf": source.replace(b"\n", b"\r\n"),
        "cr": source.replace(b"\n", b"\r"),
        "mixed": mixed,
        "latin1": source[:position] + b"# \xe9t\xe9 \xff\n" + source[position:],
        "nul": source[:position] + b"\0" + source[position:],
        "bom-crlf": b"\xef\xbb\xbf" + source.replace(b"\n", b"\r\n"),
        "no-final-newline-crlf": source.rstrip(b"\n").replace(b"\n", b"\r\n"),
    }


def special_inputs() -> dict[str, bytes]:
    """Inputs made from nothing: empty, deep nesting, bytes that are not text."""
    deep = 500
    return {
        "empty": b"",
        "only-crlf": b"\r\n\r\n",
        "deep-parens": b"x = " + b"(" * deep + b"1" + b")" * deep + b"\n",
        "deep-lists": b"x = " + b"[" * deep + b"]" * deep + b"\n",
        "deep-calls": b"import torch\ny = " + b"torch.relu(" * deep + b"x" + b")" * deep + b"\n",
        "deep-binop": b"import torch\ny = x" + b" + x" * 5000 + b"\n",
        "deep-blocks": b"".join(b" " * i + b"if x:\n" for i in range(deep)) + b" " * deep + b"y\n",
        "binary": bytes(range(256)) * 4,
        "nul-only": b"\0" * 64,
        "utf16": "import torch\nx = torch.ones(2, requires_grad=True)\n".encode("utf-16"),
    }


def compiles(data: bytes) -> bool:
    try:
        compile(data, "<fuzz>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False
    return True


def newline_changes(before: bytes, after: bytes) -> int:
    """Lines the fix left alone (the same text, matched by the patience algorithm or
    difflib) whose line ending changed."""
    try:
        from patiencediff import PatienceSequenceMatcher as Matcher
    except ImportError:  # pragma: no cover - patiencediff is a dependency of gradfix
        from difflib import SequenceMatcher as Matcher  # type: ignore[assignment]

    old, new = before.splitlines(keepends=True), after.splitlines(keepends=True)
    old_text = [line.rstrip(b"\r\n") for line in old]
    new_text = [line.rstrip(b"\r\n") for line in new]
    changed = 0
    for tag, i1, i2, j1, _ in Matcher(None, old_text, new_text).get_opcodes():
        if tag == "equal":
            changed += sum(
                old[i][len(old_text[i]) :] != new[j1 + i - i1][len(new_text[j1 + i - i1]) :]
                for i in range(i1, i2)
            )
    return changed


@dataclass
class FuzzRun:
    corpus: int
    compiling: int
    tracebacks: int
    internal_errors: int  # in all
    internal_errors_compiling: int  # on files CPython compiles
    changed: int  # files fix --write changed that compile before and after
    broken: int  # files that compiled before and not after the fix
    newline_changes: int  # untouched lines whose line ending changed
    exits: dict[str, int]


def fuzz_run(base: Path, seed: int = 33, fixtures: int = 60) -> FuzzRun:
    """The corpus written under ``base``, then ``gradfix check`` and ``fix --write
    --no-verify`` on it."""
    import random

    rng = random.Random(seed)
    paths = sorted(FIXTURES.glob("*/*.before.py"))
    corpus: dict[str, bytes] = {}
    for index, path in enumerate(sorted(rng.sample(paths, min(fixtures, len(paths))))):
        for kind, data in mutations(path.read_bytes(), rng).items():
            corpus[f"f{index:03d}_{kind}.py"] = data
    for kind, data in special_inputs().items():
        corpus[f"s_{kind}.py"] = data
    project = base / "corpus"
    project.mkdir()
    for name, data in corpus.items():
        (project / name).write_bytes(data)
    environ = dict(os.environ, XDG_CACHE_HOME=str(base / "xdg"), GRADFIX_NO_CACHE="1")
    good = {name for name, data in corpus.items() if compiles(data)}
    output, exits = "", {}
    for command in (("check",), ("fix", "--write", "--no-verify")):
        result = subprocess.run(
            gradfix_command(*command, "--no-cache", "-j", "2", "."),
            cwd=project, env=environ, capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        output += result.stdout + result.stderr
        exits[command[0]] = result.returncode
    internal = [line for line in output.splitlines() if "internal error" in line]
    changed = broken = newlines = 0
    for name in good:
        after = (project / name).read_bytes()
        if after == corpus[name]:
            continue
        if not compiles(after):
            broken += 1
            continue
        changed += 1
        newlines += newline_changes(corpus[name], after)
    return FuzzRun(
        corpus=len(corpus),
        compiling=len(good),
        tracebacks=output.count("Traceback"),
        internal_errors=len(internal),
        internal_errors_compiling=sum(line.split(":", 1)[0] in good for line in internal),
        changed=changed,
        broken=broken,
        newline_changes=newlines,
        exits=exits,
    )


def fuzz_corpus(seed: int = 33, fixtures: int = 60) -> list[str]:
    """The fuzz corpus: tracebacks, internal errors, newline changes (issue 33, items 6-7)."""
    with tempfile.TemporaryDirectory(prefix="gradfix-fuzz-") as folder:
        run = fuzz_run(Path(folder), seed, fixtures)
    return [
        f"fuzz corpus: {run.corpus} inputs (seed {seed}; {fixtures} fixtures x 9 mutations: "
        "byte flip, truncation, CRLF, CR, mixed newlines, Latin-1 bytes, NUL, BOM, no final "
        "newline; and 10 made from nothing: empty, 500-deep nesting, binary, UTF-16), "
        f"{run.compiling} of them compile; `check` and `fix --write --no-verify`",
        f"  tracebacks                {run.tracebacks}",
        f"  internal errors           {run.internal_errors} "
        f"({run.internal_errors_compiling} on code CPython compiles)",
        f"  files fixed               {run.changed} still compile, "
        f"{run.broken} compiled before and no longer do",
        f"  newline changes           {run.newline_changes} on lines the fixes left alone",
        f"  exit codes                check {run.exits['check']}, fix {run.exits['fix']}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sandbox", choices=("auto", "hooks"), default="auto")
    args = parser.parse_args()
    for line in [
        *hostile_figures(args.sandbox),
        *kill_trials(),
        *cache_poisoning(),
        *fuzz_corpus(),
    ]:
        print(line)


if __name__ == "__main__":
    main()
