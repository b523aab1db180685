"""How to drive verification: ``fix`` and ``trace`` take ``--cmd`` / ``--entry`` as
``verify`` does, and an unverified verdict names the project's own entry points and where
a run without backward calls ended (gradfix.verify.drive)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gradfix.cli import app
from gradfix.verify.drive import drivers, drivers_text, explain_unverified
from gradfix.verify.oracle import MAKE_FASTER, MAKE_VERIFIABLE

# GF201 in a function that the script's main() reaches only with an argument
EXITS_EARLY = """\
import sys

import torch


def train(steps):
    w = torch.FloatTensor(3)
    w.requires_grad = True
    w.normal_()
    for _ in range(steps):
        (w * 2).sum().backward()
    return w


def main():
    if len(sys.argv) < 2:
        print("usage: train.py STEPS")
        sys.exit(0)
    print(train(int(sys.argv[1])).grad)


if __name__ == "__main__":
    main()
"""
PYPROJECT = """\
[project]
name = "demo"
[project.scripts]
demo-train = "demo.cli:main"
other = "demo.other:run"
external = "numpy.f2py:main"
"""


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def layout(tmp_path: Path) -> Path:
    """A src layout: the model module, a script and a test that import it, a script and
    a test that do not, and the project's console scripts."""
    files = {
        "pyproject.toml": PYPROJECT,
        "src/demo/__init__.py": "",
        "src/demo/model.py": "import torch\n\ndef step(w):\n    w.normal_()\n",
        "src/demo/cli.py": "from demo.model import step\n\ndef main():\n    step(None)\n",
        "src/demo/other.py": "def run():\n    pass\n",
        "scripts/train.py": "from demo import model\n\nif __name__ == '__main__':\n    pass\n",
        "scripts/plot.py": "import matplotlib\n\nif __name__ == '__main__':\n    pass\n",
        "tests/test_model.py": "from demo.model import step\n",
        "tests/test_other.py": "import demo.other\n",
        ".venv/lib/test_x.py": "from demo.model import step\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    return tmp_path


def test_the_entry_points_that_reach_a_module_are_suggested_best_first(layout: Path) -> None:
    found = drivers(str(layout / "src/demo/model.py"), str(layout))
    assert found == (
        '--cmd "python scripts/train.py"',
        '--cmd "pytest tests/test_model.py"',
        "--entry demo.cli:main",
        "--entry demo.other:run",
    )


def test_the_file_itself_is_suggested_with_its_arguments(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(EXITS_EARLY, encoding="utf-8")
    assert drivers_text(str(tmp_path / "train.py"), str(tmp_path)) == (
        '--cmd "python train.py ARGS"'
    )


def test_without_an_entry_point_only_a_command_is_asked_for(tmp_path: Path) -> None:
    (tmp_path / "lib.py").write_text("import torch\n", encoding="utf-8")
    text = drivers_text(str(tmp_path / "lib.py"), str(tmp_path))
    assert text.startswith("--cmd COMMAND") and "train.py" not in text


def test_the_canned_hints_are_replaced_and_the_exit_is_located(layout: Path) -> None:
    path = str(layout / "src/demo/model.py")
    reason = "nothing to compare: neither version calls backward and they share no tensors"
    outcome = {"status": "ok", "exit": {"line": 9, "where": "model.py:9", "code": "sys.exit()"}}
    explained = explain_unverified(
        reason + MAKE_VERIFIABLE, {"before_outcome": outcome}, path, str(layout)
    )
    assert explained == (
        f"{reason} (the run ended at `sys.exit()`, line 9); to verify it, drive it with "
        '--cmd "python scripts/train.py" or --cmd "pytest tests/test_model.py" or '
        "--entry demo.cli:main"
    )
    faster = explain_unverified("before could not be executed: timeout" + MAKE_FASTER, {}, path,
                                str(layout))  # fmt: skip
    assert faster.endswith('stop it sooner (--max-steps 5) or drive it with --cmd "python '
                           'scripts/train.py" or --cmd "pytest tests/test_model.py" or '
                           "--entry demo.cli:main")  # fmt: skip
    assert "epochs" not in explained + faster


@pytest.mark.skipif(not __import__("gradfix.proof").proof.torch_available(), reason="torch")
def test_an_unverified_verdict_says_where_the_run_stopped_and_how_to_drive_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "train.py").write_text(EXITS_EARLY, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    code, out, _ = invoke("verify", "train.py")
    [line] = out.splitlines()
    assert line.startswith("train.py:9:5: GF201 unverified: nothing to compare"), line
    assert "(the run ended at `sys.exit(0)`, line 18)" in line
    assert line.endswith('; to verify it, drive it with --cmd "python train.py ARGS"')
    assert code == 1


@pytest.mark.skipif(not __import__("gradfix.proof").proof.torch_available(), reason="torch")
def test_fix_takes_cmd_and_entry_as_verify_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "train.py").write_text(EXITS_EARLY, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    command = f"{sys.executable} train.py 2"
    code, out, err = invoke("fix", "--verify", "--unsafe-fixes", "--cmd", command, "train.py")
    assert "No such option" not in err and code == 1, err
    assert out.startswith("train.py:9:5: GF201 ") and "nothing to compare" not in out, out
    assert "+++ b/train.py" in out  # the diff of the fix the command judged
    code, out, err = invoke("fix", "--verify", "--entry", "train:main", "train.py")
    assert out.startswith("train.py:9:5: GF201 unverified: "), (out, err)
    assert "(the run ended at `sys.exit(0)`, line 18)" in out  # main() was called
    code, out, err = invoke("fix", "--write", "--cmd", command, "--entry", "train:main", ".")
    assert (code, err) == (2, "error: give either --cmd or --entry, not both\n")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("fix", "--cmd", "python train.py"), "error: --cmd drives the verification: add"),
        (("fix", "--no-verify", "--write", "--entry", "t:m"), "error: --entry drives the"),
        (("fix", "--verify", "--entry", "train"), "error: --entry must be MODULE:FUNCTION"),
        (("trace", "--cmd", "pytest", "--", "python", "x.py"), "error: --cmd drives the"),
    ],
)
def test_a_driver_without_verification_is_one_error_line(
    args: tuple[str, ...], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("import torch\n", encoding="utf-8")
    code, out, err = invoke(*args, *(["train.py"] if args[0] == "fix" else []))
    assert code == 2 and err.startswith(message) and len(err.splitlines()) == 1, err


@pytest.mark.skipif(not __import__("gradfix.proof").proof.torch_available(), reason="torch")
def test_trace_verifies_with_the_command_given_instead_of_the_traced_program(
    tmp_path: Path,
) -> None:
    import subprocess

    data = Path(__file__).resolve().parent / "data" / "trace" / "inplace_saved.py"
    (tmp_path / "inplace_saved.py").write_text(data.read_text(encoding="utf-8"))
    (tmp_path / "noop.py").write_text("print('no backward here')\n", encoding="utf-8")
    traced = [sys.executable, "inplace_saved.py"]
    command = [sys.executable, "-m", "gradfix", "trace", "--verify", "--format", "concise"]
    done = subprocess.run(
        [*command, "--cmd", f"{sys.executable} noop.py", "--", *traced],
        capture_output=True, text=True, cwd=tmp_path, check=False,
    )  # fmt: skip
    # the command, not the traced program, ran each version: it makes no backward call
    assert "inplace_saved.py:6:1: GF204 unverified: nothing to compare" in done.stdout, done
    plain = subprocess.run([*command, "--", *traced], capture_output=True, text=True,
                           cwd=tmp_path, check=False)  # fmt: skip
    assert "inplace_saved.py:6:1: GF204 verified: " in plain.stdout
