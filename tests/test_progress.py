"""Progress on stderr during long runs, on a terminal only: ``check`` and ``fix`` count
the files (done / total, rate, time left), ``verify``, ``fix --verify`` and ``trace
--verify`` the fixes (``fix 2 of 3``). Never in a pipe, nor with ``--quiet``.

Each command runs in a subprocess whose stderr is a pseudo-terminal, as in a shell."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from gradfix.proof import torch_available

# two fixes: one leaf made by a scaled factory, one by a shifted one (GF103 each)
TWO_FIXES = """\
import torch

w = torch.randn(3, requires_grad=True) * 0.5
b = torch.zeros(3, requires_grad=True) + 1.0
(w * 2 + b).sum().backward()
"""
FILES = 60  # more than the 50 files below which no bar is shown
#: what a terminal shows of a line rich rewrites in place: its escape codes removed
_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\r")


def gradfix(args: list[str], cwd: Path, *, terminal: bool) -> tuple[int, str, str]:
    """Run ``gradfix ARGS`` with stderr on a pseudo-terminal (or a pipe); stdout is not
    a terminal either way. Returns the exit code, stdout and stderr (escape codes removed)."""
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "NO_COLOR", "TERM")}
    env.update(COLUMNS="160", TERM="xterm-256color", GRADFIX_NO_CACHE="1")
    command = [sys.executable, "-m", "gradfix", *args]
    if not terminal:
        done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
        return done.returncode, done.stdout, done.stderr
    master, slave = pty.openpty()
    with tempfile.TemporaryFile() as stdout_file, subprocess.Popen(
        command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=stdout_file,
        stderr=slave,
    ) as process:  # fmt: skip
        os.close(slave)  # a file, not a pipe, for stdout: a long report cannot block it
        chunks = []
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the process closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        os.close(master)
        code = process.wait(timeout=600)
        stdout_file.seek(0)
        stdout = stdout_file.read().decode()
    return code, stdout, _ESCAPES.sub("\n", b"".join(chunks).decode(errors="replace"))


@pytest.fixture
def many_files(tmp_path: Path) -> Path:
    for number in range(FILES):
        (tmp_path / f"m{number:02}.py").write_text(f"x = {number}\n", encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize("command", ["check", "fix"])
def test_files_done_of_the_total_with_rate_and_time_left_on_a_terminal(
    command: str, many_files: Path
) -> None:
    code, out, err = gradfix([command, "."], many_files, terminal=True)
    assert code == 0, err
    assert f"{FILES}/{FILES} files" in err, err
    assert re.search(r"\d+\.\d s/file|\d+\.\d files/s", err), err  # the rate
    assert re.search(r"\d:\d\d:\d\d", err), err  # the time left
    assert "files" not in out  # stdout is the report only


@pytest.mark.parametrize("command", ["check", "fix"])
def test_no_progress_in_a_pipe_nor_with_quiet(command: str, many_files: Path) -> None:
    code, _, err = gradfix([command, "."], many_files, terminal=False)
    assert code == 0 and "files" not in err and "\x1b" not in err, err
    code, _, err = gradfix([command, "--quiet", "."], many_files, terminal=True)
    assert code == 0 and err.strip() == "", err


@pytest.mark.skipif(not torch_available(), reason="verification needs torch")
def test_verify_counts_the_fixes_on_a_terminal_and_nothing_in_a_pipe(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(TWO_FIXES, encoding="utf-8")
    code, out, err = gradfix(["verify", "train.py"], tmp_path, terminal=True)
    assert out.count(" verified") == 2, (out, err)
    assert "fix 2 of 2" in err and "proving" in err, err
    code, out, err = gradfix(["verify", "train.py"], tmp_path, terminal=False)
    assert "fix 2 of 2" not in err and "\x1b" not in err, err
    assert err == "2 fixes: 2 verified, 0 rejected, 0 unverified.\n"


@pytest.mark.skipif(not torch_available(), reason="verification needs torch")
def test_trace_verify_counts_the_fixes_it_proves(tmp_path: Path) -> None:
    """Two non-leaf ``.grad`` reads: the run reports both, each fix is proven."""
    script = Path(__file__).resolve().parent / "data" / "trace" / "two_nonleaf_grads.py"
    (tmp_path / script.name).write_text(script.read_text(encoding="utf-8"), encoding="utf-8")
    args = ["trace", "--verify", "--format", "concise", "--", sys.executable, script.name]
    code, out, err = gradfix(args, tmp_path, terminal=True)
    assert out.count(" GF106 verified: ") == 2, (out, err)
    assert "fix 2 of 2" in err and "proving" in err, err
    code, out, err = gradfix(args, tmp_path, terminal=False)
    assert out.count(" GF106 verified: ") == 2 and "fix 2 of 2" not in err, err
