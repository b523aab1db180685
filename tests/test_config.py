"""Configuration: [tool.gradfix] in pyproject.toml / gradfix.toml and --config overrides."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gradfix.cli import app
from gradfix.config import ConfigError, find_config, load_config

# GF201 on line 3, GF101 on line 5
BUGGY = """import torch
w = torch.randn(3, requires_grad=True)
w.normal_()
a0 = w[0] * 2
A = torch.tensor([a0, w[1]])
"""


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text(BUGGY, encoding="utf-8")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_train.py").write_text(BUGGY, encoding="utf-8")
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "copy.py").write_text(BUGGY, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def codes(out: str) -> list[str]:
    return sorted(
        line.split(": ")[1].split()[0] + "@" + line.split(":")[0] for line in out.splitlines()
    )


def test_pyproject_table_selects_ignores_and_excludes(project: Path) -> None:
    (project / "pyproject.toml").write_text(
        '[project]\nname = "x"\n\n[tool.gradfix]\nignore = ["GF101"]\nexclude = ["build"]\n'
        '[tool.gradfix.per-file-ignores]\n"tests/*" = ["GF201"]\n',
        encoding="utf-8",
    )
    code, out, _ = invoke("check", "--format", "concise", ".")
    assert code == 1
    assert codes(out) == ["GF201@src/train.py"]


@pytest.mark.parametrize("command", ["check", "fix"])
def test_an_excluded_file_named_on_the_command_line_gets_a_note(
    project: Path, command: str
) -> None:
    """`exclude` applies to files named on the command line too (pre-commit and editors
    name every file), but not silently."""
    (project / "pyproject.toml").write_text('[tool.gradfix]\nexclude = ["build"]\n')
    code, out, err = invoke(command, "build/copy.py", "src/train.py")
    assert code == 1 and "build/copy.py" not in out
    assert err.splitlines()[0] == (
        "build/copy.py: skipped: excluded by pyproject.toml [tool.gradfix] exclude"
        ' (to check it anyway: --config "exclude=[]")'
    )
    code, _, err = invoke(command, "build")  # a directory: its files are not noted
    assert code == 0 and "skipped" not in err


def test_command_line_beats_the_file(project: Path) -> None:
    (project / "gradfix.toml").write_text('select = ["GF2"]\nexclude = ["build", "tests"]\n')
    _, out, _ = invoke("check", "--format", "concise", ".")
    assert codes(out) == ["GF201@src/train.py"]
    _, out, _ = invoke("check", "--format", "concise", "--select", "GF101", ".")
    assert codes(out) == ["GF101@src/train.py"]
    _, out, _ = invoke("check", "--format", "concise", "--config", "exclude=[]", "src", "build")
    assert codes(out) == ["GF201@build/copy.py", "GF201@src/train.py"]


def test_unsafe_fixes_from_the_configuration(project: Path) -> None:
    mixed = (
        "import torch\na = torch.nn.Parameter(torch.rand(2))\nA = torch.tensor([a[0] * 2, 1.0])\n"
    )
    (project / "src" / "train.py").write_text(mixed, encoding="utf-8")
    code, out, _ = invoke("fix", "src")
    assert out == ""  # the fix is unsafe
    code, out, _ = invoke("fix", "--config", "unsafe-fixes=true", "src")
    assert "+A = torch.stack([a[0] * 2, torch.as_tensor(1.0)])" in out


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('[tool.gradfix]\nselekt = ["GF1"]\n', "unknown key 'selekt' in [tool.gradfix]"),
        ('[tool.gradfix]\nselect = ["GF999"]\n', "unknown rule code or prefix 'GF999'"),
        ('[tool.gradfix]\nunsafe-fixes = "yes"\n', "unsafe-fixes must be true or false"),
        ("[tool.gradfix]\nignore = [1]\n", "ignore must be a list of strings"),
        ('[tool.gradfix.per-file-ignores]\n"a.py" = ["GF9"]\n', "unknown rule code"),
        ("[tool.gradfix\n", "invalid TOML"),
    ],
)
def test_bad_configuration_is_one_clear_line(project: Path, content: str, message: str) -> None:
    (project / "pyproject.toml").write_text(content, encoding="utf-8")
    code, out, err = invoke("check", ".")
    assert code == 2 and out == ""
    assert message in err and err.count("\n") == 1, err
    assert "pyproject.toml" in err


@pytest.mark.parametrize(
    ("content", "arguments", "origin"),
    [
        ('[tool.gradfix]\nignore = ["GF999"]\n', [], "pyproject.toml [tool.gradfix] ignore"),
        ('[tool.gradfix]\nselect = ["GF999"]\n', [], "pyproject.toml [tool.gradfix] select"),
        (
            '[tool.gradfix]\nextend-select = ["GF999"]\n',
            [],
            "pyproject.toml [tool.gradfix] extend-select",
        ),
        (
            '[tool.gradfix.per-file-ignores]\n"a.py" = ["GF999"]\n',
            [],
            "pyproject.toml [tool.gradfix] per-file-ignores 'a.py'",
        ),
        ("[tool.gradfix]\n", ["--config", "ignore=['GF999']"], "--config ignore=..."),
        ("[tool.gradfix]\n", ["--ignore", "GF999"], "--ignore"),
        ("[tool.gradfix]\n", ["--select", "GF999"], "--select"),
    ],
)
def test_unknown_code_names_where_it_came_from(
    project: Path, content: str, arguments: list[str], origin: str
) -> None:
    (project / "pyproject.toml").write_text(content, encoding="utf-8")
    code, _, err = invoke("check", *arguments, ".")
    assert code == 2
    assert err == (
        f"error: unknown rule code or prefix 'GF999' in {origin}"
        " (run `gradfix rules` to list them)\n"
    )


def test_unknown_code_in_gradfix_toml_names_the_file(project: Path) -> None:
    (project / "gradfix.toml").write_text('ignore = ["GF999"]\n', encoding="utf-8")
    _, _, err = invoke("check", ".")
    assert "'GF999' in gradfix.toml ignore (run" in err


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("ignore", "expected KEY=VALUE"),
        ("ignore=GF1", "the value must be TOML"),
        ("x=1", "unknown key 'x'"),
    ],
)
def test_bad_override(project: Path, override: str, message: str) -> None:
    code, _, err = invoke("check", "--config", override, ".")
    assert code == 2 and message in err and err.count("\n") == 1


def test_nearest_configuration_wins(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.gradfix]\nignore = ['GF101']\n")
    inner = tmp_path / "pkg"
    inner.mkdir()
    (inner / "pyproject.toml").write_text("[project]\nname = 'pkg'\n")  # no [tool.gradfix]
    assert find_config(str(inner)) == str(tmp_path / "pyproject.toml")
    (inner / "gradfix.toml").write_text("ignore = ['GF201']\n")
    assert find_config(str(inner)) == str(inner / "gradfix.toml")
    assert load_config(str(inner / "gradfix.toml")).ignore == ["GF201"]
    with pytest.raises(ConfigError):
        load_config(overrides=["nope=1"])
