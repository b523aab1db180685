"""Speed at codebase scale: gradfix cold, warm and fix, TorchFix 0.7.0 on the same files.

    python bench/speed.py                                  # the transformers 5.23.0 package
    python bench/speed.py --packages transformers timm diffusers
    python bench/speed.py --paths DIR_OR_FILE ...          # explicit paths, nothing downloaded
    python bench/speed.py --setup-torchfix ~/.cache/gradfix-bench/torchfix   # venv + TorchFix
    python bench/speed.py --setup-gradfix ~/.cache/gradfix-bench/gradfix     # venv + this checkout
    python bench/speed.py --torchfix ~/.cache/gradfix-bench/torchfix/bin/torchfix
    python bench/speed.py --torchfix ... --torchfix-sample 200 --seed 0      # extrapolated
    python bench/speed.py --runs torchfix --torchfix ...   # only some of the rows

The corpus is the package directory of each pinned wheel (transformers==5.23.0,
timm==1.0.31, diffusers==0.42.1), downloaded and unpacked by ``bench/corpus.py`` into a
cache outside the repository. Every tool runs as a subprocess from an empty temporary
directory (so gradfix's ``.gradfix_cache``, which it puts next to the configuration file
or in the current directory, lands there and is deleted afterwards; no configuration file
applies, so the default rules run) with ``-j JOBS`` (default: the usable cores). Prints a
markdown table: files, lines, wall seconds (``time.perf_counter`` around the subprocess),
CPU seconds of the process tree (``os.wait4``), peak memory of the whole tree (the highest
sum of VmRSS over the process and its descendants, polled from /proc), of its largest
process and as summed PSS, the issue's target for the row and whether it is met.
``bench/verify_speed.py`` runs as the last row. docs/speed.md explains each figure.

TorchFix is run as ``torchfix -j JOBS PATH...`` (its CLI: LibCST's parallel codemod
runner, without --fix it only prints violations and diffs). It exits 0 whatever it finds,
and 1 when some files failed to parse or transform; both are valid timings. A full run
over transformers takes 15-20 minutes on 2 cores: ``--torchfix-sample N`` runs it (and
gradfix, for a measured ratio) on a seeded sample of N files and extrapolates its per-file
rate to the whole corpus, labelled as extrapolated.

TorchFix runs from a venv of its own; ``--setup-gradfix DIR`` runs gradfix the same way:
this checkout installed as users install it (``pip install .``, no editable finder, no
system site-packages: no ``.pth`` file of the machine runs at each start-up), reinstalled
at every run. Without it, gradfix is this Python's (``python -m gradfix``, the editable
install of a development checkout).
"""

from __future__ import annotations

import argparse
import compileall
import importlib.util
import os
import platform
import random
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import corpus

PINNED = {"transformers": "5.23.0", "timm": "1.0.31", "diffusers": "0.42.1"}
TORCHFIX_VERSION = "0.7.0"
GRADFIX_DEFAULT = f"{shlex.quote(sys.executable)} -m gradfix"
THIS_PYTHON = "this Python's install"  # how the default gradfix is installed, in the report
#: gradfix runs on the sample TorchFix runs on (half before TorchFix, half after)
SAMPLE_RUNS = 5
RUNS = ("cold", "warm", "fix", "torchfix", "verify")
VERIFY_SCRIPT = Path(__file__).resolve().parent / "verify_speed.py"

# the targets of issue 6 (verification: issue 4; warm: issue 12's ≤ 0.5 s, issue 6 asked ≤ 1 s);
# the time targets are for transformers
COLD_TARGET_S = 15.0
WARM_TARGET_S = 0.5
MEMORY_TARGET_MB = 500.0
RATIO_TARGET = 60.0
VERIFY_TARGET_S = 0.3


def fail(message: str) -> NoReturn:
    """One line on stderr (file, problem, what to do) and exit 2."""
    print(f"speed.py: {message}", file=sys.stderr)
    sys.exit(2)


# --- memory of a process tree, from /proc --------------------------------------------------


def _children_from_proc(pid: int) -> list[int]:
    """The children of every thread of ``pid`` (``/proc/PID/task/TID/children``)."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as handle:
                found += [int(child) for child in handle.read().split()]
        except (OSError, ValueError):
            continue
    return found


def _parents() -> dict[int, list[int]]:
    """Every process's children, by scanning ``/proc/*/stat`` for the parent pid (for
    kernels without ``/proc/PID/task/TID/children``)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as handle:
                stat = handle.read()
        except OSError:
            continue
        # the command name, in parentheses, may hold spaces: the fields follow the last ")"
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(entry))
    return children


def process_tree(pid: int, *, scan: bool = False) -> list[int]:
    """``pid`` and all its descendants alive now."""
    by_parent = _parents() if scan else None
    tree, pending = [], [pid]
    while pending:
        current = pending.pop()
        tree.append(current)
        if by_parent is not None:
            pending += by_parent.get(current, [])
        else:
            pending += _children_from_proc(current)
    return tree


def _proc_field_mb(path: str, key: str) -> float:
    """A ``Key:   123 kB`` line of a /proc file, in MB; 0 when missing (process gone)."""
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            for line in handle:
                if line.startswith(key):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0.0


def rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` (VmRSS) in MB; 0 for a process gone or a zombie."""
    return _proc_field_mb(f"/proc/{pid}/status", "VmRSS:")


def pss_mb(pid: int) -> float:
    """Proportional set size of ``pid`` in MB: each shared page divided among the
    processes sharing it, so the sum over a tree is its real footprint (0 when the kernel
    has no ``smaps_rollup``)."""
    return _proc_field_mb(f"/proc/{pid}/smaps_rollup", "Pss:")


def _children_files_exist() -> bool:
    return os.path.exists(f"/proc/self/task/{os.getpid()}/children")


class TreeMemoryPoller:
    """Polls, in a thread, the summed RSS of a process tree every ``interval`` seconds and
    keeps the peaks: of the sum (``peak_tree_mb``), of one process (``peak_process_mb``)
    and of the summed proportional set size (``peak_pss_mb``).

        poller = TreeMemoryPoller(process.pid).start()
        process.wait()
        poller.stop()
    """

    def __init__(self, pid: int, interval: float = 0.025) -> None:
        self.pid = pid
        self.interval = interval
        self.peak_tree_mb = 0.0
        self.peak_process_mb = 0.0
        self.peak_pss_mb = 0.0
        self.samples = 0
        self._scan = not _children_files_exist()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def start(self) -> TreeMemoryPoller:
        self.sample()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._done.set()
        self._thread.join()

    def sample(self) -> None:
        tree = process_tree(self.pid, scan=self._scan)
        sizes = [rss_mb(pid) for pid in tree]
        self.samples += 1
        self.peak_tree_mb = max(self.peak_tree_mb, sum(sizes))
        self.peak_process_mb = max(self.peak_process_mb, max(sizes, default=0.0))
        self.peak_pss_mb = max(self.peak_pss_mb, sum(pss_mb(pid) for pid in tree))

    def _poll(self) -> None:
        while not self._done.wait(self.interval):
            self.sample()


@dataclass
class Measurement:
    command: list[str]
    returncode: int
    wall: float
    #: user + system CPU seconds of the process and every descendant it waited for
    cpu: float
    peak_tree_mb: float
    peak_process_mb: float
    peak_pss_mb: float
    stdout: str
    stderr: str

    def last_stderr_line(self) -> str:
        lines = [line.strip() for line in self.stderr.splitlines() if line.strip()]
        return lines[-1] if lines else ""

    def summary(self) -> str:
        """gradfix's closing summary (stdout for check, stderr for fix), else the last
        line on stderr."""
        found = SUMMARY.findall(self.stdout) + SUMMARY.findall(self.stderr)
        return found[-1].strip() if found else self.last_stderr_line()


SUMMARY = re.compile(
    r"^(?:Found \d|All checks passed|No findings|Would fix|Would change|Nothing to fix"
    r"|No fixes available).*$",
    re.MULTILINE,
)


def measure(
    command: Sequence[str],
    *,
    cwd: str | Path,
    env: dict[str, str] | None = None,
    interval: float = 0.025,
) -> Measurement:
    """Run ``command`` to its end: wall time, CPU time and peak memory of its process tree.

    The CPU time (``wait4``'s resource usage of the child, which includes every descendant
    reaped below it, e.g. pool workers) hardly depends on what else the machine runs."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        try:
            process = subprocess.Popen(list(command), cwd=cwd, env=env, stdout=out, stderr=err)
        except OSError as error:
            fail(f"cannot run {command[0]}: {error.strerror}; check the path")
        poller = TreeMemoryPoller(process.pid, interval).start()
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - start
        poller.stop()
        process.returncode = returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode("utf-8", "replace")
        stderr = err.read().decode("utf-8", "replace")
    # not wait4's ru_maxrss: on Linux exec() carries the parent's high-water mark into it
    return Measurement(
        command=list(command),
        returncode=returncode,
        wall=wall,
        cpu=usage.ru_utime + usage.ru_stime,
        peak_tree_mb=poller.peak_tree_mb,
        peak_process_mb=poller.peak_process_mb,
        peak_pss_mb=poller.peak_pss_mb,
        stdout=stdout,
        stderr=stderr,
    )


# --- the corpus ----------------------------------------------------------------------------


@dataclass
class Corpus:
    label: str
    #: what the tools are given (directories or files)
    paths: list[Path]
    #: the Python files in them
    files: list[Path]
    lines: int
    #: the issue's time targets apply (the transformers package, whole)
    is_target_corpus: bool = False


def python_files(paths: Sequence[Path]) -> list[Path]:
    files: list[Path] = []
    for path in paths:
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return files


def count_lines(files: Sequence[Path]) -> int:
    """Lines of every file; reading them also puts them in the page cache, so no tool
    pays for the first read from disk."""
    return sum(file.read_bytes().count(b"\n") for file in files)


def make_corpus(label: str, paths: Sequence[Path], *, is_target_corpus: bool = False) -> Corpus:
    files = python_files(paths)
    return Corpus(label, list(paths), files, count_lines(files), is_target_corpus)


def package_corpus(packages: Sequence[str]) -> Corpus:
    """The package directory of each pinned wheel, fetched into the corpus cache."""
    specs = [f"{package}=={PINNED[package]}" for package in packages]
    try:
        unpacked = corpus.fetch(specs, corpus.cache_dir())
    except subprocess.CalledProcessError as error:
        fail(
            f"pip download {' '.join(specs)} failed (exit {error.returncode});"
            " check access to PyPI or pass --paths"
        )
    directories = [root / package for root, package in zip(unpacked, packages)]
    for directory in directories:
        if not directory.is_dir():
            fail(f"{directory}: no package directory in the wheel; delete it")
    label = ", ".join(f"{p} {PINNED[p]} (`{p}/`)" for p in packages)
    return make_corpus(label, directories, is_target_corpus=list(packages) == ["transformers"])


def sample_corpus(whole: Corpus, size: int, seed: int) -> Corpus:
    """A fixed random sample of ``size`` files: the same seed, the same files."""
    files = sorted(random.Random(seed).sample(whole.files, min(size, len(whole.files))))
    return Corpus(f"sample of {len(files)} files (seed {seed})", files, files, count_lines(files))


# --- TorchFix -------------------------------------------------------------------------------


def torchfix_command(location: str) -> list[str]:
    """How to run TorchFix from ``location``: a venv directory, its ``bin/torchfix``, or a
    Python interpreter that has it installed (``python -m torchfix``)."""
    path = Path(location).expanduser()
    if path.is_dir():
        path = path / "bin" / "torchfix"
    if not path.exists():
        fail(f"{path}: no such file; pass a venv, its bin/torchfix or its python")
    if path.name.startswith("python"):
        return [str(path), "-m", "torchfix"]
    return [str(path)]


def setup_torchfix(directory: Path) -> Path:
    """A venv in ``directory`` with TorchFix installed from PyPI (once); its entry point."""
    executable = directory / "bin" / "torchfix"
    if executable.exists():
        return executable
    steps = [
        [sys.executable, "-m", "venv", str(directory)],
        [
            str(directory / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "-q",
            f"torchfix=={TORCHFIX_VERSION}",
        ],
    ]
    for step in steps:
        if subprocess.run(step, check=False).returncode != 0:
            fail(f"{directory}: `{shlex.join(step)}` failed; check access to PyPI")
    return executable


def setup_gradfix(directory: Path) -> list[str]:
    """A venv in ``directory`` (made once) with this checkout installed, reinstalled now:
    the command that runs its gradfix."""
    python = directory / "bin" / "python"
    steps = [] if python.exists() else [[sys.executable, "-m", "venv", str(directory)]]
    checkout = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="gradfix-install-") as scratch:
        # built from a copy: setuptools leaves a build/ folder where it builds
        root = Path(scratch) / "gradfix"
        for name in INSTALLED_PARTS:
            source, target = checkout / name, root / name
            if source.is_dir():
                shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target)
        pip = [str(python), "-m", "pip", "install", "-q"]
        steps += [[*pip, str(root)], [*pip, "--no-deps", "--force-reinstall", str(root)]]
        for step in steps:  # the dependencies, then this checkout as it is now
            if subprocess.run(step, check=False, capture_output=True).returncode != 0:
                fail(f"{directory}: `{shlex.join(step)}` failed; check access to PyPI")
    return [str(python), "-m", "gradfix"]


#: what ``pip install .`` of the checkout reads
INSTALLED_PARTS = ("pyproject.toml", "README.md", "src", "codemods")


def torchfix_version(command: Sequence[str]) -> str:
    try:
        result = subprocess.run(
            [*command, "--version"], capture_output=True, text=True, check=False
        )
    except OSError as error:
        fail(f"{command[0]}: {error.strerror}; pass a venv with TorchFix (--setup-torchfix)")
    return result.stdout.strip() or "unknown"


VIOLATION = re.compile(r"^\S.*:\d+:\d+: TOR\d+", re.MULTILINE)
FINISHED = re.compile(r"Finished checking (\d+) files")


def torchfix_notes(run: Measurement) -> str:
    checked = FINISHED.search(run.stderr)
    parts = [f"exit {run.returncode}"]
    if run.returncode == 1:
        parts[0] += " (some files failed to parse or transform; timing valid)"
    elif run.returncode not in (0, 1):
        parts[0] += " (**failed**: " + (run.last_stderr_line() or "no message") + ")"
    if checked:
        parsed = int(checked.group(1))
        parts.append(
            f"{parsed:,} files containing `torch` parsed (the rest are skipped by its text "
            f"filter), {run.cpu / max(1, parsed):.2f} CPU s per parsed file"
        )
    parts.append(f"{len(VIOLATION.findall(run.stdout)):,} violations")
    return "; ".join(parts)


# --- the runs and the table ------------------------------------------------------------------


@dataclass
class Commands:
    gradfix: list[str]
    torchfix: list[str] | None = None
    verify: list[str] | None = None
    #: how the gradfix measured is installed (said in the report)
    install: str = THIS_PYTHON


@dataclass
class Settings:
    jobs: int
    runs: tuple[str, ...] = RUNS
    torchfix_sample: int | None = None
    seed: int = 0
    interval: float = 0.025


@dataclass
class Row:
    run: str
    files: str = "—"
    lines: str = "—"
    wall: str = "—"
    cpu: str = "—"
    peak_tree: str = "—"
    peak_process: str = "—"
    peak_pss: str = "—"
    target: str = "—"
    met: str = "—"
    notes: str = ""

    def cells(self) -> list[str]:
        return [
            self.run,
            self.files,
            self.lines,
            self.wall,
            self.cpu,
            self.peak_tree,
            self.peak_process,
            self.peak_pss,
            self.target,
            self.met,
            self.notes,
        ]


HEADER = [
    "run",
    "files",
    "lines",
    "wall s",
    "CPU s",
    "peak MB (process tree)",
    "peak MB (largest process)",
    "peak MB (PSS sum)",
    "target",
    "met",
    "notes",
]


@dataclass
class Report:
    corpus: Corpus
    settings: Settings
    rows: list[Row] = field(default_factory=list)
    #: the measurements by name (cold, fill, warm, fix, fix-after-check, torchfix,
    #: sample-gradfix, verify)
    measured: dict[str, Measurement] = field(default_factory=dict)
    load_before: tuple[float, float, float] = (0.0, 0.0, 0.0)
    load_after: tuple[float, float, float] = (0.0, 0.0, 0.0)
    torchfix_version: str = ""
    gradfix_version: str = ""
    revision: str = ""
    install: str = ""


def _met(value: float, limit: float) -> str:
    return "yes" if value <= limit else "**no**"


def _time_target(limit: float, corpus: Corpus, wall: float) -> tuple[str, str]:
    if not corpus.is_target_corpus:
        return f"≤ {limit:g} s (transformers only)", "n/a"
    return f"≤ {limit:g} s", _met(wall, limit)


def _pss(run: Measurement) -> str:
    return f"{run.peak_pss_mb:.0f}" if run.peak_pss_mb > 0 else "n/a"


def measured_row(name: str, run: Measurement, corpus: Corpus, notes: str = "") -> Row:
    return Row(
        run=name,
        files=f"{len(corpus.files):,}",
        lines=f"{corpus.lines:,}",
        wall=f"{run.wall:.2f}",
        cpu=f"{run.cpu:.1f}",
        peak_tree=f"{run.peak_tree_mb:.0f}",
        peak_process=f"{run.peak_process_mb:.0f}",
        peak_pss=_pss(run),
        notes=notes or f"exit {run.returncode}: {run.summary()}",
    )


def gradfix_row(name: str, run: Measurement, corpus: Corpus, time_limit: float | None) -> Row:
    row = measured_row(name, run, corpus)
    targets, met = [], []
    if time_limit is not None:
        target, verdict = _time_target(time_limit, corpus, run.wall)
        targets.append(target)
        met.append(verdict)
    targets.append(f"≤ {MEMORY_TARGET_MB:g} MB")
    met.append(_met(run.peak_tree_mb, MEMORY_TARGET_MB))
    row.target, row.met = "; ".join(targets), "; ".join(met)
    if run.returncode not in (0, 1, 2):
        row.met = "**failed**"
    return row


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator > 0 else float("inf")


def ratio_row(
    name: str, torchfix: tuple[float, float], gradfix: tuple[float, float], how: str
) -> Row:
    """TorchFix's (wall, CPU) seconds over gradfix's; the target is judged on wall time."""
    wall, cpu = _ratio(torchfix[0], gradfix[0]), _ratio(torchfix[1], gradfix[1])
    return Row(
        run=name,
        wall=f"{wall:.1f}x",
        cpu=f"{cpu:.1f}x",
        target=f"≥ {RATIO_TARGET:g}x",
        met="yes" if wall >= RATIO_TARGET else "**no**",
        notes=f"TorchFix {torchfix[0]:.1f} s / gradfix {gradfix[0]:.2f} s wall, "
        f"{torchfix[1]:.1f} / {gradfix[1]:.1f} CPU s ({how})",
    )


def run_gradfix(report: Report, commands: Commands, workdir: Path, env: dict[str, str]) -> None:
    corpus, settings = report.corpus, report.settings
    jobs = ["-j", str(settings.jobs)]
    paths = [str(path) for path in corpus.paths]
    check = [*commands.gradfix, "check", *jobs]

    def run(name: str, command: list[str]) -> Measurement:
        result = measure(command, cwd=workdir, env=env, interval=settings.interval)
        report.measured[name] = result
        return result

    if "cold" in settings.runs:
        cold = run("cold", [*check, "--no-cache", *paths])
        report.rows.append(
            gradfix_row("`gradfix check --no-cache` (cold)", cold, corpus, COLD_TARGET_S)
        )
    if "warm" in settings.runs:
        fill = run("fill", [*check, *paths])
        report.rows.append(
            gradfix_row("`gradfix check`, empty cache (fills it)", fill, corpus, None)
        )
        entries = sum(1 for _ in (workdir / ".gradfix_cache").rglob("*.json"))
        warm = run("warm", [*check, *paths])
        row = gradfix_row("`gradfix check` (warm: cache filled)", warm, corpus, WARM_TARGET_S)
        row.notes += f" Cache: {entries:,} entries, in a temporary directory."
        if entries == 0:
            row.met = "**not warm**: no cache entries where gradfix was run"
        report.rows.append(row)
    if "fix" in settings.runs:
        fix = run("fix", [*commands.gradfix, "fix", *jobs, "--no-cache", *paths])
        report.rows.append(
            gradfix_row("`gradfix fix --no-cache` (preview, no write)", fix, corpus, None)
        )
    if "fix" in settings.runs and "warm" in settings.runs:
        # check and fix share the cache: only the files with a fix are linted again
        after_check = run("fix-after-check", [*commands.gradfix, "fix", *jobs, *paths])
        name = "`gradfix fix` after a warm `check` (shared cache)"
        report.rows.append(gradfix_row(name, after_check, corpus, None))


def run_torchfix(report: Report, commands: Commands, workdir: Path, env: dict[str, str]) -> None:
    corpus, settings = report.corpus, report.settings
    if commands.torchfix is None:
        report.rows.append(
            Row(run="TorchFix", notes="not run: pass --torchfix PATH or --setup-torchfix DIR")
        )
        return
    report.torchfix_version = torchfix_version(commands.torchfix)
    title = f"TorchFix {report.torchfix_version} `-j {settings.jobs}`"
    jobs = ["-j", str(settings.jobs)]
    target = corpus
    if settings.torchfix_sample is not None:
        target = sample_corpus(corpus, settings.torchfix_sample, settings.seed)
    paths = [str(path) for path in target.paths]
    sampled = target is not corpus
    gradfix_command = [*commands.gradfix, "check", *jobs, "--no-cache", *paths]
    # gradfix on the sample takes a second or two, TorchFix minutes, and a shared machine's
    # speed drifts over minutes: gradfix runs before and after TorchFix, its median counts
    samples = [
        measure(gradfix_command, cwd=workdir, env=env, interval=settings.interval)
        for _ in range(SAMPLE_RUNS // 2 if sampled else 0)
    ]
    torchfix = measure(
        [*commands.torchfix, *jobs, *paths], cwd=workdir, env=env, interval=settings.interval
    )
    report.measured["torchfix"] = torchfix
    if target is corpus:
        report.rows.append(measured_row(title, torchfix, corpus, torchfix_notes(torchfix)))
        if "cold" in report.measured:
            report.rows.append(
                ratio_row(
                    "ratio TorchFix / gradfix cold",
                    (torchfix.wall, torchfix.cpu),
                    (report.measured["cold"].wall, report.measured["cold"].cpu),
                    "both measured",
                )
            )
        return
    report.rows.append(
        measured_row(f"{title}, {target.label}", torchfix, target, torchfix_notes(torchfix))
    )
    samples += [
        measure(gradfix_command, cwd=workdir, env=env, interval=settings.interval)
        for _ in range(SAMPLE_RUNS - len(samples))
    ]
    sample = sorted(samples, key=lambda run: run.wall)[len(samples) // 2]
    report.measured["sample-gradfix"] = sample
    walls = ", ".join(f"{run.wall:.2f}" for run in samples)
    row = gradfix_row("`gradfix check --no-cache`, the same sample", sample, target, None)
    row.notes = f"median of {len(samples)} runs, before and after TorchFix ({walls} s); " + (
        row.notes
    )
    report.rows.append(row)
    report.rows.append(
        ratio_row(
            "ratio TorchFix / gradfix cold, sample",
            (torchfix.wall, torchfix.cpu),
            (sample.wall, sample.cpu),
            "both measured on the sample",
        )
    )
    scale = len(corpus.files) / max(1, len(target.files))
    estimate = (torchfix.wall * scale, torchfix.cpu * scale)
    report.rows.append(
        Row(
            run="TorchFix, **extrapolated** to all files",
            files=f"{len(corpus.files):,}",
            lines=f"{corpus.lines:,}",
            wall=f"{estimate[0]:.0f} (extrapolated)",
            cpu=f"{estimate[1]:.0f} (extrapolated)",
            notes=f"{torchfix.wall / len(target.files):.3f} s per file (wall) measured on the "
            f"sample × {len(corpus.files):,} files",
        )
    )
    if "cold" in report.measured:
        report.rows.append(
            ratio_row(
                "ratio TorchFix (**extrapolated**) / gradfix cold",
                estimate,
                (report.measured["cold"].wall, report.measured["cold"].cpu),
                "TorchFix extrapolated from the sample",
            )
        )


FIXES = re.compile(r"fixes (\d+)")
AMORTISED = re.compile(r"^wall ([\d.]+) s\s+amortised ([\d.]+) s per fix", re.MULTILINE)
WITH_STARTUP = re.compile(r"incl\. start-up ([\d.]+) s per fix")


def run_verify(report: Report, commands: Commands, workdir: Path, env: dict[str, str]) -> None:
    if commands.verify is None:
        return
    result = measure(commands.verify, cwd=workdir, env=env, interval=report.settings.interval)
    report.measured["verify"] = result
    row = Row(
        run="`bench/verify_speed.py` (proving fixes)",
        wall=f"{result.wall:.2f}",
        cpu=f"{result.cpu:.1f}",
        peak_tree=f"{result.peak_tree_mb:.0f}",
        peak_process=f"{result.peak_process_mb:.0f}",
        peak_pss=_pss(result),
        target=f"≤ {VERIFY_TARGET_S:g} s per fix (issue 4)",
    )
    fixes, amortised = FIXES.search(result.stdout), AMORTISED.search(result.stdout)
    if result.returncode != 0 or fixes is None or amortised is None:
        row.met = "**failed**"
        row.notes = f"exit {result.returncode}: {result.last_stderr_line() or 'no figures'}"
    else:
        per_fix = float(amortised.group(2))
        startup = WITH_STARTUP.search(result.stdout)
        row.met = _met(per_fix, VERIFY_TARGET_S)
        row.notes = (
            f"{fixes.group(1)} fixes proven in {amortised.group(1)} s: {per_fix:.3f} s "
            "per fix amortised"
        )
        if startup:
            row.notes += f" ({startup.group(1)} s incl. the fork server's start-up)"
        verdicts = [line for line in result.stdout.splitlines() if line.startswith("verdicts:")]
        row.notes += "; " + verdicts[0] if verdicts else ""
    report.rows.append(row)


def gradfix_version(command: Sequence[str]) -> str:
    """``gradfix 0.1.0``; exits with one line when ``command`` does not run gradfix."""
    try:
        result = subprocess.run(
            [*command, "--version"], capture_output=True, text=True, check=False
        )
    except OSError as error:
        fail(f"{command[0]}: {error.strerror}; install gradfix or pass --gradfix")
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        fail(
            f"`{shlex.join(command)} --version` failed ({last}); install gradfix or pass --gradfix"
        )
    return result.stdout.strip()


def source_revision() -> str:
    """The commit of the repository this script is in (``+dirty`` with local changes)."""
    command = ["git", "-C", str(Path(__file__).parent), "describe", "--always", "--dirty=+dirty"]
    try:
        result = subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError:
        return "unknown"
    return result.stdout.strip() or "unknown"


def compile_bytecode(package: str = "gradfix") -> list[str]:
    """Compile the bytecode of ``package`` (as imported here: an editable install's source
    folders), as ``pip install`` of a wheel does. Without it, an environment with
    ``PYTHONDONTWRITEBYTECODE=1`` compiles gradfix's ~250 modules from source at every
    start (0.2 s of each warm run, measured 2026-11-23), which no installed copy pays.
    Returns the folders compiled."""
    folders: list[str] = []
    for name in (package, f"{package}.codemods"):
        try:
            spec = importlib.util.find_spec(name)
        except ImportError:
            continue
        for folder in (spec.submodule_search_locations or []) if spec else []:
            if os.path.isdir(folder) and folder not in folders:
                compileall.compile_dir(folder, quiet=1)
                folders.append(folder)
    return folders


def run_benchmark(corpus: Corpus, commands: Commands, settings: Settings) -> Report:
    """Every requested run, from an empty temporary directory (the warm run's cache lives
    there and is deleted with it)."""
    report = Report(corpus, settings, load_before=os.getloadavg())
    env = dict(os.environ)
    env.pop("GRADFIX_NO_CACHE", None)  # the warm run needs the cache
    compile_bytecode()
    report.gradfix_version = gradfix_version(commands.gradfix)
    report.install = commands.install
    report.revision = source_revision()
    with tempfile.TemporaryDirectory(prefix="gradfix-speed-") as directory:
        workdir = Path(directory)
        run_gradfix(report, commands, workdir, env)
        if "torchfix" in settings.runs:
            run_torchfix(report, commands, workdir, env)
        if "verify" in settings.runs:
            run_verify(report, commands, workdir, env)
    report.load_after = os.getloadavg()
    return report


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"

    numeric = {1, 2, 3, 4, 5, 6, 7}
    rule = ["---:" if index in numeric else "---" for index in range(len(header))]
    return "\n".join([line(header), "|" + "|".join(rule) + "|", *map(line, rows)])


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def render(report: Report) -> str:
    corpus, settings = report.corpus, report.settings
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    before = ", ".join(f"{value:.2f}" for value in report.load_before)
    after = ", ".join(f"{value:.2f}" for value in report.load_after)
    lines = [
        f"### {corpus.label}: {len(corpus.files):,} files, {corpus.lines:,} lines",
        "",
        f"{time.strftime('%Y-%m-%d')}, {report.gradfix_version} (repository at "
        f"{report.revision}; {report.install}), {cores} cores ({cpu_model()}), Python "
        f"{platform.python_version()}, `-j {settings.jobs}`; load average before "
        f"{before}, after {after}.",
        "",
        markdown_table(HEADER, [row.cells() for row in report.rows]),
        "",
        "Peak memory (judged against the target): the highest sum of VmRSS over the process "
        f"and all its descendants, polled every {settings.interval * 1000:.0f} ms from /proc; "
        "pages that forked workers share are counted once in each, so it overstates the "
        "footprint. Next: the largest single process, and the highest sum of PSS (shared "
        "pages divided among their sharers: the footprint itself).",
    ]
    return "\n".join(lines)


# --- command line ---------------------------------------------------------------------------


def _runs(text: str) -> tuple[str, ...]:
    runs = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [run for run in runs if run not in RUNS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown run {unknown[0]!r}; choose from {RUNS}")
    return runs


def _usable_cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        epilog="Example: python bench/speed.py --setup-torchfix ~/.cache/gradfix-bench/torchfix "
        "--torchfix-sample 200",
    )
    parser.add_argument(
        "--packages",
        nargs="+",
        choices=sorted(PINNED),
        default=["transformers"],
        help="pinned wheels whose package directories are measured (default: transformers)",
    )
    parser.add_argument(
        "--paths", nargs="+", type=Path, help="measure these directories or files instead"
    )
    parser.add_argument(
        "-j",
        "--jobs",
        type=int,
        default=_usable_cores(),
        help="processes for gradfix, TorchFix and the verifier (default: the usable cores)",
    )
    parser.add_argument(
        "--runs",
        type=_runs,
        default=RUNS,
        help=f"the rows to measure, comma-separated (default: {','.join(RUNS)})",
    )
    parser.add_argument(
        "--gradfix",
        default=GRADFIX_DEFAULT,
        help="the gradfix command (default: this Python's gradfix)",
    )
    parser.add_argument(
        "--setup-gradfix",
        type=Path,
        metavar="DIR",
        help="install this checkout into a venv in DIR (made once, reinstalled each run) and "
        "measure that gradfix, as TorchFix is measured from its own venv",
    )
    parser.add_argument(
        "--torchfix", metavar="PATH", help="a venv with TorchFix, its bin/torchfix or its python"
    )
    parser.add_argument(
        "--setup-torchfix",
        type=Path,
        metavar="DIR",
        help=f"create a venv in DIR with torchfix=={TORCHFIX_VERSION} (once) and use it",
    )
    parser.add_argument(
        "--torchfix-sample",
        type=int,
        metavar="N",
        help="run TorchFix (and gradfix) on a seeded sample of N files; extrapolate TorchFix",
    )
    parser.add_argument("--seed", type=int, default=0, help="of the sample (default: 0)")
    parser.add_argument(
        "--interval", type=float, default=0.025, help="memory poll in seconds (default: 0.025)"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.jobs < 1 or (args.torchfix_sample is not None and args.torchfix_sample < 1):
        fail("--jobs and --torchfix-sample take a number of at least 1")
    if args.setup_torchfix is not None and args.torchfix is None:
        args.torchfix = str(setup_torchfix(args.setup_torchfix.expanduser().resolve()))
    gradfix = shlex.split(args.gradfix)
    install = THIS_PYTHON if args.gradfix == GRADFIX_DEFAULT else f"`{args.gradfix}`"
    if args.setup_gradfix is not None:
        gradfix = setup_gradfix(args.setup_gradfix.expanduser().resolve())
        install = "`pip install .` in a venv of its own, as TorchFix"
    commands = Commands(
        gradfix=gradfix,
        torchfix=None if args.torchfix is None else torchfix_command(args.torchfix),
        verify=[sys.executable, str(VERIFY_SCRIPT), "--jobs", str(args.jobs)],
        install=install,
    )
    if args.paths:
        missing = [path for path in args.paths if not path.exists()]
        if missing:
            fail(f"{missing[0]}: no such file or directory")
        paths = [path.resolve() for path in args.paths]
        chosen = make_corpus(", ".join(f"`{path}`" for path in paths), paths)
    else:
        chosen = package_corpus(args.packages)
    settings = Settings(args.jobs, args.runs, args.torchfix_sample, args.seed, args.interval)
    print(render(run_benchmark(chosen, commands, settings)))


if __name__ == "__main__":
    main()
