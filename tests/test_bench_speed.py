"""bench/speed.py: the table it builds (with fast stand-ins for gradfix, TorchFix and the
verifier on a tiny corpus) and its memory poller (on real processes)."""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
HAS_PROC = Path("/proc/self/status").exists()

FAKE_GRADFIX = """
import json, os, sys, time
if sys.argv[2:] == ["--version"]:
    print("gradfix 0.0+fake")
    sys.exit(0)
with open(sys.argv[1], "a") as log:
    log.write(json.dumps({"argv": sys.argv[2:], "cwd": os.getcwd(),
                          "no_cache": os.environ.get("GRADFIX_NO_CACHE")}) + "\\n")
time.sleep(0.05)
if sys.argv[2] == "check" and "--no-cache" not in sys.argv:
    os.makedirs(".gradfix_cache/ab", exist_ok=True)
    with open(".gradfix_cache/ab/entry.json", "w") as entry:
        entry.write("{}")
print("a.py:1:1: GF201 in-place op on a leaf")
print("Found 1 finding (1 fixable with `gradfix fix`).")
sys.exit(1)
"""

FAKE_TORCHFIX = """#!{python}
import sys, time
if "--version" in sys.argv:
    print("0.7.0")
    sys.exit(0)
time.sleep(0.3)
print("a.py:3:1: TOR101 Use of deprecated function torch.solve")
print("--- a/a.py")
print("b.py:7:5: TOR201 Parameter `pretrained` is deprecated")
print("Finished checking 2 files.", file=sys.stderr)
sys.exit(1)  # TorchFix: some files failed to parse or transform
"""

FAKE_VERIFY = """
print("fixes 12  jobs 2  start-up (fork server, torch) 1.50 s")
print("wall 2.4 s  amortised 0.200 s per fix")
print("amortised incl. start-up 0.325 s per fix")
print("peak RSS of one runner 300 MB")
print("verdicts: equivalent 12")
"""


@pytest.fixture
def speed(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH))  # speed.py imports its neighbour corpus.py
    return importlib.import_module("speed")


@pytest.fixture
def tiny_corpus(tmp_path: Path) -> Path:
    root = tmp_path / "corpus" / "pkg"
    (root / "sub").mkdir(parents=True)
    (root / "a.py").write_text("import torch\nw = torch.ones(2, requires_grad=True)\n")
    (root / "b.py").write_text("x = 1\n")
    (root / "sub" / "c.py").write_text("import torch\n\n\ny = torch.zeros(3)\n")
    (root / "notes.txt").write_text("not python\n")
    return root


def fake_commands(speed: ModuleType, tmp_path: Path, log: Path) -> Any:
    gradfix = tmp_path / "fake_gradfix.py"
    gradfix.write_text(FAKE_GRADFIX)
    torchfix = tmp_path / "bin" / "torchfix"
    torchfix.parent.mkdir()
    torchfix.write_text(FAKE_TORCHFIX.format(python=sys.executable))
    torchfix.chmod(0o755)
    return speed.Commands(
        gradfix=[sys.executable, str(gradfix), str(log)],
        torchfix=speed.torchfix_command(str(tmp_path)),  # a venv-like directory
        verify=[sys.executable, "-c", FAKE_VERIFY],
    )


def table_rows(text: str) -> list[list[str]]:
    """The cells of the markdown table in ``text``, header first (separator dropped)."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    assert re.fullmatch(r"\|(?:-{3}:?\|)+", lines[1]), lines[1]
    rows = [re.split(r"(?<!\\)\|", line)[1:-1] for line in lines]
    assert len({len(row) for row in rows}) == 1, "every row has as many cells as the header"
    return [[cell.strip() for cell in row] for index, row in enumerate(rows) if index != 1]


def test_table_of_every_run_with_a_torchfix_sample(
    speed: ModuleType, tiny_corpus: Path, tmp_path: Path
) -> None:
    log = tmp_path / "calls.jsonl"
    commands = fake_commands(speed, tmp_path, log)
    corpus = speed.make_corpus("tiny", [tiny_corpus])
    settings = speed.Settings(jobs=2, torchfix_sample=2, seed=3, interval=0.01)

    report = speed.run_benchmark(corpus, commands, settings)
    text = speed.render(report)

    header, *rows = table_rows(text)
    assert "gradfix 0.0+fake (repository at " in text
    assert header[:4] == ["run", "files", "lines", "wall s"]
    by_run = {row[0]: row for row in rows}
    assert [row[0] for row in rows] == [
        "`gradfix check --no-cache` (cold)",
        "`gradfix check`, empty cache (fills it)",
        "`gradfix check` (warm: cache filled)",
        "`gradfix fix --no-cache` (preview, no write)",
        "`gradfix fix` after a warm `check` (shared cache)",
        "TorchFix 0.7.0 `-j 2`, sample of 2 files (seed 3)",
        "`gradfix check --no-cache`, the same sample",
        "ratio TorchFix / gradfix cold, sample",
        "TorchFix, **extrapolated** to all files",
        "ratio TorchFix (**extrapolated**) / gradfix cold",
        "`bench/verify_speed.py` (proving fixes)",
    ]
    cold = by_run["`gradfix check --no-cache` (cold)"]
    assert cold[1:3] == ["3", "7"]  # the .py files and their lines, not notes.txt
    assert cold[8] == "≤ 15 s (transformers only); ≤ 500 MB"
    assert cold[9] == "n/a; yes"
    assert cold[10] == "exit 1: Found 1 finding (1 fixable with `gradfix fix`)."
    assert cold[3] == f"{report.measured['cold'].wall:.2f}"
    assert cold[4] == f"{report.measured['cold'].cpu:.1f}"
    assert float(cold[5]) >= float(cold[6]) > 0

    warm = by_run["`gradfix check` (warm: cache filled)"]
    assert "Cache: 1 entries" in warm[10]

    torchfix, sample = report.measured["torchfix"], report.measured["sample-gradfix"]
    sample_files = by_run["TorchFix 0.7.0 `-j 2`, sample of 2 files (seed 3)"]
    assert sample_files[1] == "2"
    assert "exit 1 (some files failed" in sample_files[10]
    assert "2 violations" in sample_files[10]
    assert f"{torchfix.cpu / 2:.2f} CPU s per parsed file" in sample_files[10]
    assert by_run["ratio TorchFix / gradfix cold, sample"][3] == (
        f"{torchfix.wall / sample.wall:.1f}x"
    )
    estimate = torchfix.wall / 2 * 3
    assert by_run["TorchFix, **extrapolated** to all files"][3] == f"{estimate:.0f} (extrapolated)"
    ratio = by_run["ratio TorchFix (**extrapolated**) / gradfix cold"]
    assert ratio[3] == f"{estimate / report.measured['cold'].wall:.1f}x"
    assert ratio[4] == f"{torchfix.cpu * 1.5 / report.measured['cold'].cpu:.1f}x"
    assert ratio[8] == "≥ 60x"

    verify = by_run["`bench/verify_speed.py` (proving fixes)"]
    assert verify[9] == "yes"
    assert "12 fixes proven in 2.4 s: 0.200 s per fix" in verify[10]

    calls = [json.loads(line) for line in log.read_text().splitlines()]
    # the sample's gradfix runs: two before TorchFix, three after, the median counts
    assert [call["argv"][0] for call in calls] == ["check"] * 3 + ["fix"] * 2 + ["check"] * 5
    notes = by_run["`gradfix check --no-cache`, the same sample"][10]
    walls = [float(w) for w in notes.split("(")[1].split(" s)")[0].split(", ")]
    assert notes.startswith("median of 5 runs, before and after TorchFix (") and len(walls) == 5
    assert f"{sample.wall:.2f}" == f"{sorted(walls)[2]:.2f}"
    assert "--no-cache" in calls[3]["argv"] and "--no-cache" not in calls[4]["argv"]
    assert all(call["argv"][1:3] == ["-j", "2"] for call in calls)
    assert "--no-cache" in calls[0]["argv"] and "--no-cache" not in calls[2]["argv"]
    assert all(call["no_cache"] is None for call in calls)  # the warm run may cache
    workdirs = {call["cwd"] for call in calls}
    assert len(workdirs) == 1 and not Path(workdirs.pop()).exists()  # the cache went with it
    assert not any(tiny_corpus.rglob(".gradfix_cache"))


def test_torchfix_on_every_file_gives_a_measured_ratio(
    speed: ModuleType, tiny_corpus: Path, tmp_path: Path
) -> None:
    commands = fake_commands(speed, tmp_path, tmp_path / "calls.jsonl")
    commands.verify = [sys.executable, "-c", "import sys; sys.exit('no torch')"]
    corpus = speed.make_corpus("tiny", [tiny_corpus])
    settings = speed.Settings(jobs=1, runs=("cold", "torchfix", "verify"), interval=0.01)

    report = speed.run_benchmark(corpus, commands, settings)
    _, *rows = table_rows(speed.render(report))

    assert [row[0] for row in rows] == [
        "`gradfix check --no-cache` (cold)",
        "TorchFix 0.7.0 `-j 1`",
        "ratio TorchFix / gradfix cold",
        "`bench/verify_speed.py` (proving fixes)",
    ]
    ratio = report.measured["torchfix"].wall / report.measured["cold"].wall
    assert rows[2][3] == f"{ratio:.1f}x"
    assert "both measured" in rows[2][10]
    assert rows[3][9] == "**failed**" and "no torch" in rows[3][10]


def test_torchfix_is_not_run_without_a_venv(speed: ModuleType, tiny_corpus: Path) -> None:
    commands = speed.Commands(gradfix=[sys.executable, "-c", "print('gradfix 0.0+fake')"])
    settings = speed.Settings(jobs=1, runs=("torchfix",), interval=0.01)
    report = speed.run_benchmark(speed.make_corpus("tiny", [tiny_corpus]), commands, settings)
    assert [row.run for row in report.rows] == ["TorchFix"]
    assert "--torchfix" in report.rows[0].notes


def test_a_warm_run_without_cache_entries_is_flagged(speed: ModuleType, tiny_corpus: Path) -> None:
    commands = speed.Commands(gradfix=[sys.executable, "-c", "print('gradfix 0.0+fake')"])
    settings = speed.Settings(jobs=1, runs=("warm",), interval=0.01)
    report = speed.run_benchmark(speed.make_corpus("tiny", [tiny_corpus]), commands, settings)
    assert [row.run for row in report.rows][1] == "`gradfix check` (warm: cache filled)"
    assert report.rows[1].met.startswith("**not warm**")


def test_a_gradfix_that_does_not_run_stops_with_one_line(
    speed: ModuleType, tiny_corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    commands = speed.Commands(gradfix=[sys.executable, "-c", "raise SystemExit('no gradfix')"])
    settings = speed.Settings(jobs=1, runs=("cold",))
    with pytest.raises(SystemExit) as stop:
        speed.run_benchmark(speed.make_corpus("tiny", [tiny_corpus]), commands, settings)
    assert stop.value.code == 2
    message = capsys.readouterr().err
    assert message.count("\n") == 1 and "--version` failed (no gradfix)" in message
    commands.gradfix = [str(tiny_corpus / "missing-gradfix")]
    with pytest.raises(SystemExit):
        speed.run_benchmark(speed.make_corpus("tiny", [tiny_corpus]), commands, settings)
    assert "missing-gradfix: No such file or directory; install" in capsys.readouterr().err


def test_torchfix_command_from_a_venv_its_entry_point_or_its_python(
    speed: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "bin").mkdir()
    for name in ("torchfix", "python"):
        (tmp_path / "bin" / name).touch()
    assert speed.torchfix_command(str(tmp_path)) == [str(tmp_path / "bin" / "torchfix")]
    python = str(tmp_path / "bin" / "python")
    assert speed.torchfix_command(python) == [python, "-m", "torchfix"]
    with pytest.raises(SystemExit):
        speed.torchfix_command(str(tmp_path / "missing"))
    assert "missing: no such file; pass a venv" in capsys.readouterr().err


ALLOCATE = (
    "import time\n"
    "block = bytearray(b'x') * (80 << 20)\n"
    "while time.process_time() < 0.3: pass\n"  # CPU time, whatever the machine's load
    "time.sleep(1.0)\n"
)
PARENT = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {ALLOCATE!r}], check=True)"


@pytest.mark.skipif(not HAS_PROC, reason="needs /proc")
def test_poller_sums_the_rss_of_a_real_process_tree(speed: ModuleType) -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT])
    poller = speed.TreeMemoryPoller(parent.pid, interval=0.02).start()
    assert parent.wait() == 0
    poller.stop()
    assert poller.samples > 1
    assert poller.peak_process_mb >= 80  # the grandchild's block, seen by polling alone
    assert poller.peak_tree_mb > poller.peak_process_mb  # plus the parent interpreter


@pytest.mark.skipif(not HAS_PROC, reason="needs /proc")
def test_memory_and_cpu_of_a_real_process_tree(speed: ModuleType, tmp_path: Path) -> None:
    run = speed.measure([sys.executable, "-c", PARENT], cwd=tmp_path, interval=0.02)
    assert run.returncode == 0, run.stderr
    assert run.peak_process_mb >= 80  # the grandchild's block
    assert run.peak_tree_mb > run.peak_process_mb  # plus the parent interpreter
    assert run.cpu >= 0.3  # the grandchild's busy loop counts
    if Path("/proc/self/smaps_rollup").exists():
        assert 80 <= run.peak_pss_mb <= run.peak_tree_mb + 1  # sharing only lowers it


@pytest.mark.skipif(not HAS_PROC, reason="needs /proc")
def test_process_tree_from_children_files_and_from_a_scan_agree(speed: ModuleType) -> None:
    sleeper = "import time; time.sleep(30)"
    code = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {sleeper!r}])"
    parent = subprocess.Popen([sys.executable, "-c", code])
    try:
        tree = [parent.pid]
        for _ in range(500):  # the grandchild appears once the parent has started it
            tree = speed.process_tree(parent.pid)
            if len(tree) == 2:
                break
            time.sleep(0.01)
        assert len(tree) == 2
        assert sorted(speed.process_tree(parent.pid, scan=True)) == sorted(tree)
        assert all(speed.rss_mb(pid) > 0 for pid in tree)
    finally:
        for pid in reversed(speed.process_tree(parent.pid)):
            os.kill(pid, 9)
        parent.wait()
    assert speed.rss_mb(parent.pid) == 0


def test_markdown_table_escapes_pipes(speed: ModuleType) -> None:
    table = speed.markdown_table(["a", "b"], [["x|y", "1"]])
    assert table.splitlines() == ["| a | b |", "|---|---:|", "| x\\|y | 1 |"]


def test_bytecode_is_compiled_before_timing(
    speed: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An environment that writes no bytecode (``PYTHONDONTWRITEBYTECODE``) would compile
    every module of gradfix at every timed start; the benchmark compiles them once."""
    package = tmp_path / "speedpkg"
    (package / "codemods").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "codemods" / "__init__.py").write_text("")
    (package / "rule.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    folders = speed.compile_bytecode("speedpkg")
    assert folders == [str(package), str(package / "codemods")]
    assert list((package / "__pycache__").glob("rule.*.pyc"))
    assert list((package / "codemods" / "__pycache__").glob("__init__.*.pyc"))


def test_setup_gradfix_installs_this_checkout_into_its_venv_each_run(
    speed: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python, calls = venv / "bin" / "python", tmp_path / "calls.txt"
    script = f'#!/bin/sh\necho "$@" >> {calls}\nfor last; do :; done\nls "$last" >> {calls}\n'
    python.write_text(script + f"[ ! -e {tmp_path}/fail ]\n")
    python.chmod(0o755)
    assert speed.setup_gradfix(venv) == [str(python), "-m", "gradfix"]
    lines = calls.read_text().splitlines()
    copy = lines[0].split()[-1]  # a copy of the checkout (setuptools builds in place)
    listing = ["README.md", "codemods", "pyproject.toml", "src"]
    assert lines == [  # the venv exists: not made again
        f"-m pip install -q {copy}",
        *listing,
        f"-m pip install -q --no-deps --force-reinstall {copy}",  # the checkout as it is now
        *listing,
    ]
    assert not Path(copy).exists()
    (tmp_path / "fail").touch()
    with pytest.raises(SystemExit) as stop:
        speed.setup_gradfix(venv)
    assert stop.value.code == 2
    message = capsys.readouterr().err
    assert message.count("\n") == 1 and "failed; check access to PyPI" in message
