"""Lint once: a file is linted one time per run, whatever shows its findings.

``check``'s text format shows under each finding its fix applied alone; those come from
the lint that found the findings (:class:`gradfix.engine.FileLint`), cached with them, and
not from linting the file again (issue 12: "the default text output re-lints every file
for its code frames")."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

import gradfix.engine
from gradfix.cli import app
from gradfix.engine import FileLint, lint_source, single_fixes
from gradfix.registry import all_rules

BUGGY = (
    "import torch\n"
    "w = torch.randn(3, requires_grad=True)\n"
    "w.normal_()\n"
    "x = torch.tensor([w[0], w[1]])\n"
)


@pytest.fixture
def lints(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The sources linted (each call of the engine's one lint step)."""
    seen: list[str] = []
    collect = gradfix.engine.collect_reports

    def counting(source, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(source)
        return collect(source, *args, **kwargs)

    monkeypatch.setattr(gradfix.engine, "collect_reports", counting)
    return seen


def test_check_text_format_lints_each_file_once(
    tmp_path: Path, lints: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(BUGGY)
    result = CliRunner().invoke(app, ["check", "--no-cache", "-j", "1", "train.py"])
    assert result.exit_code == 1, result.output
    assert "= fix (safe): Wrap in `torch.no_grad()`" in result.output
    assert lints == [BUGGY]


def test_warm_check_shows_frames_without_linting(
    tmp_path: Path, lints: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GRADFIX_NO_CACHE", raising=False)
    (tmp_path / "train.py").write_text(BUGGY)
    cold = CliRunner().invoke(app, ["check", "-j", "1", "train.py"])
    lints.clear()
    warm = CliRunner().invoke(app, ["check", "-j", "1", "train.py"])
    assert warm.output == cold.output
    assert lints == []


def test_file_lint_answers_like_the_functions() -> None:
    rules = all_rules()
    lint = FileLint(BUGGY, rules=rules, path="t.py")
    assert lint.findings == lint_source(BUGGY, rules=rules, path="t.py").findings
    fixed = lint_source(BUGGY, rules=rules, path="t.py", fix=True, unsafe_fixes=True)
    assert lint.fixed(unsafe_fixes=True).source == fixed.source
    assert [s.source for s in lint.singles()] == [
        s.source for s in single_fixes(BUGGY, rules=rules, path="t.py")
    ]


def test_language_server_lints_a_buffer_once(lints: list[str]) -> None:
    """Diagnostics, the quick fixes of a code action and fix-all come from one lint of
    the text (the second pass of fix-all lints the text the first pass made)."""
    from gradfix.lsp import BufferLint, ClientText

    lint = BufferLint.of("file:///t.py", ClientText(BUGGY), "t.py", all_rules())
    assert {f.code for f in lint.findings} == {"GF101", "GF201"}
    assert len(lint.singles()) == 2
    assert lint.fix_all_edit() is not None
    assert lints.count(BUGGY) == 1
