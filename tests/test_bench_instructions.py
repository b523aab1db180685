"""bench/instructions.py: its children run the pipeline they count (without valgrind
here: CI need not have it), and without valgrind it stops with one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "instructions.py"


@pytest.mark.parametrize("stage", ["start", "analysis", "rules"])
def test_each_child_stage_runs_on_real_files(stage: str, tmp_path: Path) -> None:
    files = sorted(ROOT.glob("fixtures/*/*.py"))[:6] + sorted(ROOT.glob("bench/realworld/*.py"))[:3]
    listing = tmp_path / "files.txt"
    listing.write_text("\n".join(map(str, files)) + "\n")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--child", stage, "--files", str(listing)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_without_valgrind_one_line_and_exit_2(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(tmp_path)}  # no valgrind on this PATH
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--sample", "1"],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    assert done.returncode == 2
    assert (
        done.stderr.strip() == "instructions.py: valgrind is not installed (apt install valgrind)"
    )
