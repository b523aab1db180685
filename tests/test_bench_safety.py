"""bench/safety.py: its measures of issue 33 (kill trials, cache poisoning, fuzz corpus)
run on tiny inputs and count what they claim to count."""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.fixture
def safety(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH))
    return importlib.import_module("safety")


def test_newline_changes_count_only_the_lines_a_fix_left_alone(safety: ModuleType) -> None:
    before = b"a\r\nb\r\nc\n"
    assert safety.newline_changes(before, before) == 0
    # an inserted line (its own ending) and a rewritten one are not counted
    assert safety.newline_changes(before, b"a\r\nX\nB\r\nc\n") == 0
    # a and c kept their text but lost their endings
    assert safety.newline_changes(before, b"a\nX\r\nb\r\nc\r\n") == 2


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_session_processes_finds_a_child_of_the_session_until_it_ends(
    safety: ModuleType, tmp_path: Path
) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
    )
    try:
        assert safety.session_processes(child.pid, str(tmp_path)) == [child.pid]
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    assert safety.session_processes(child.pid, str(tmp_path)) == []


def test_cache_poisoning_sees_a_signed_write_and_no_unsigned_one(
    safety: ModuleType, tmp_path: Path
) -> None:
    environ = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "xdg"))
    environ.pop("GRADFIX_NO_CACHE", None)
    sources = safety.fixture_sources(3)
    fixed = safety.fixed_texts(sources, tmp_path, environ)
    assert fixed != sources
    edited = safety.poison_run("unsigned edit", False, sources, fixed, tmp_path, environ)
    control = safety.poison_run("signed control", True, sources, fixed, tmp_path, environ)
    changing = sum(a != b for a, b in zip(sources, fixed))
    assert (edited.entries, edited.poisoned, edited.errors) == (changing, [], 0)
    assert control.entries == changing and len(control.poisoned) == changing


def test_fuzz_corpus_counts_on_a_tiny_corpus(safety: ModuleType, tmp_path: Path) -> None:
    run = safety.fuzz_run(tmp_path, seed=2, fixtures=2)  # two fixtures with safe fixes
    assert run.corpus == 2 * 9 + len(safety.special_inputs())
    assert 0 < run.compiling < run.corpus
    assert run.changed > 0  # their CRLF, CR, mixed-newline and BOM copies too
    assert (run.tracebacks, run.internal_errors, run.newline_changes) == (0, 0, 0)
