"""``gradfix check`` output formats (SARIF 2.1.0, GitHub annotations), ``--statistics``
and ``--add-noqa``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gradfix.cli import app
from gradfix.noqa import add_noqa, add_noqa_to_file

SCHEMA = Path(__file__).resolve().parent / "data" / "sarif" / "sarif-2.1.0-rtm.5.json"
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
def buggy(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text(BUGGY, encoding="utf-8")
    return path


def test_sarif_is_valid_against_the_sarif_2_1_0_schema(buggy: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    code, out, _ = invoke("check", "--format", "sarif", str(buggy))
    assert code == 1
    log = json.loads(out)
    jsonschema.validate(log, json.loads(SCHEMA.read_text(encoding="utf-8")))
    [run] = log["runs"]
    results = run["results"]
    assert [r["ruleId"] for r in results] == ["GF201", "GF101"]
    region = results[0]["locations"][0]["physicalLocation"]["region"]
    assert (region["startLine"], region["startColumn"]) == (3, 1)
    rules = run["tool"]["driver"]["rules"]
    assert rules[results[1]["ruleIndex"]]["id"] == "GF101"
    assert rules[results[1]["ruleIndex"]]["properties"] == {
        "fixSafety": "unsafe",
        "fix": "sometimes safe/unsafe",
        "fixAvailability": "sometimes",
        "fixSafeties": ["safe", "unsafe"],
    }


def test_sarif_of_a_clean_tree_is_valid_and_empty(tmp_path: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    (tmp_path / "ok.py").write_text("import torch\nx = torch.ones(2)\n", encoding="utf-8")
    code, out, _ = invoke("check", "--format", "sarif", str(tmp_path))
    assert code == 0
    log = json.loads(out)
    jsonschema.validate(log, json.loads(SCHEMA.read_text(encoding="utf-8")))
    assert log["runs"][0]["results"] == []


def test_github_annotations(buggy: Path) -> None:
    code, out, _ = invoke("check", "--format", "github", str(buggy))
    assert code == 1
    first, second = out.splitlines()
    assert first.startswith(f"::warning file={buggy},line=3,col=1,endLine=3,endColumn=12,")
    assert "title=gradfix GF201 (leaf-inplace)::GF201 In-place `w.normal_()`" in first
    assert second.startswith(f"::warning file={buggy},line=5,col=5,")


def test_statistics(buggy: Path) -> None:
    code, out, _ = invoke("check", "--statistics", str(buggy))
    assert code == 1
    assert out.splitlines() == [
        "1  GF101  [*] tensor-from-tensors",
        "1  GF201  [*] leaf-inplace",
        "2         total",
        "[*] every finding of the rule has a safe fix: `gradfix fix --write` fixes them",
    ]


def test_statistics_without_findings_says_so(tmp_path: Path) -> None:
    (tmp_path / "ok.py").write_text("import torch\nx = torch.ones(2)\n", encoding="utf-8")
    code, out, _ = invoke("check", "--statistics", str(tmp_path))
    assert (code, out) == (0, "No findings.\n")


def test_statistics_total_is_aligned_with_the_counts(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(BUGGY * 9, encoding="utf-8")
    _, out, _ = invoke("check", "--statistics", str(tmp_path))
    assert out.splitlines()[:3] == [
        " 9  GF101  [*] tensor-from-tensors",
        " 9  GF201  [*] leaf-inplace",
        "18         total",
    ]


def test_add_noqa_makes_the_tree_check_clean(buggy: Path) -> None:
    (buggy.parent / "clean.py").write_text("import torch\n", encoding="utf-8")
    code, out, err = invoke("check", "--add-noqa", str(buggy.parent))
    # the findings it silenced are not reported again: the tree is clean now
    assert (code, out) == (0, "All checks passed.\n"), out
    assert err == "Added 2 noqa comments in 1 file.\n"
    text = buggy.read_text(encoding="utf-8")
    assert "w.normal_()  # noqa: GF201\n" in text
    assert "A = torch.tensor([a0, w[1]])  # noqa: GF101\n" in text
    code, out, _ = invoke("check", str(buggy))
    assert code == 0, out
    code, _, err = invoke("check", "--add-noqa", str(buggy))
    assert (code, err) == (0, "Added 0 noqa comments in 0 files.\n")  # idempotent


def test_add_noqa_reports_the_findings_it_could_not_silence(buggy: Path) -> None:
    # line 5 ends inside a string: a comment there would be part of the string
    buggy.write_text(BUGGY.replace("w[1]])\n", 'w[1]]), """\n"""\n'), encoding="utf-8")
    code, out, err = invoke("check", "--add-noqa", "--format", "concise", str(buggy))
    assert code == 1 and err == "Added 1 noqa comment in 1 file.\n"
    assert (
        out == f"{buggy}:5:5: GF101 `torch.tensor()` of tensors cuts the autograd graph; "
        "use `torch.stack()`\n"
    )


def test_add_noqa_exits_2_when_a_file_cannot_be_written(buggy: Path) -> None:
    buggy.chmod(0o444)
    try:
        code, _, err = invoke("check", "--add-noqa", str(buggy))
    finally:
        buggy.chmod(0o644)
    assert code == 2 and "Added 0 noqa comments in 0 files." in err
    assert f"{buggy}: cannot add noqa comments: " in err
    assert buggy.read_text(encoding="utf-8") == BUGGY


def test_add_noqa_refuses_stdin(buggy: Path) -> None:
    result = CliRunner().invoke(
        app, ["check", "--add-noqa", "-", "--stdin-filename", str(buggy)], input=BUGGY
    )
    assert result.exit_code == 2
    assert result.stderr == "error: --add-noqa writes files and cannot read stdin; give the paths\n"
    assert buggy.read_text(encoding="utf-8") == BUGGY


def test_add_noqa_leaves_a_file_that_changed_since_it_was_checked(buggy: Path) -> None:
    from gradfix.codemods import ALL_RULES
    from gradfix.engine import lint_source

    findings = lint_source(BUGGY, rules=ALL_RULES).findings
    edited = "# a line added meanwhile\n" + BUGGY
    buggy.write_text(edited, encoding="utf-8")
    with pytest.raises(OSError, match="changed since it was checked"):
        add_noqa_to_file(str(buggy), findings, BUGGY)
    assert buggy.read_text(encoding="utf-8") == edited


@pytest.mark.parametrize(
    ("line", "codes", "expected"),
    [
        ("x = f()\n", {"GF101"}, "x = f()  # noqa: GF101\n"),
        ("x = f()  # noqa: GF201\r\n", {"GF101"}, "x = f()  # noqa: GF201, GF101\r\n"),
        ("x = f()  # keep this\n", {"GF101"}, "x = f()  # keep this  # noqa: GF101\n"),
        ("x = f()  # noqa\n", {"GF101"}, "x = f()  # noqa\n"),  # already suppresses all
        ("x = f()\n", {"GF201", "GF101"}, "x = f()  # noqa: GF101, GF201\n"),
        (
            "x = f()  # gradfix: ignore[GF201]\n",
            {"GF101", "GF201"},
            "x = f()  # gradfix: ignore[GF201, GF101]\n",
        ),
        ("x = f() + \\\n", {"GF101"}, "x = f() + \\\n"),  # a comment would break the line
    ],
)
def test_add_noqa_lines(line: str, codes: set[str], expected: str) -> None:
    assert add_noqa(line + "y = 1\n", {1: codes})[0] == expected + "y = 1\n"


def test_add_noqa_skips_lines_that_end_inside_a_string() -> None:
    source = 'x = f("""\nline\n""")\n'
    assert add_noqa(source, {1: {"GF101"}}) == (source, 0)


def test_pre_commit_hooks_run_real_commands() -> None:
    """The hooks' entries are gradfix commands with options that exist."""
    import shlex

    yaml_path = Path(__file__).resolve().parent.parent / ".pre-commit-hooks.yaml"
    entries = {}
    current = None
    for line in yaml_path.read_text(encoding="utf-8").splitlines():
        if line.startswith("- id: "):
            current = line.removeprefix("- id: ").strip()
        elif line.strip().startswith("entry: ") and current is not None:
            entries[current] = shlex.split(line.split("entry: ", 1)[1])
    assert set(entries) == {"gradfix", "gradfix-fix"}
    for argv in entries.values():
        assert argv[0] == "gradfix"
        code, _, err = invoke(*argv[1:], "--help")
        assert code == 0, err
