"""The content-hash result cache (.gradfix_cache)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

import gradfix.runner
from gradfix.cli import app

BUGGY = "import torch\nw = torch.randn(3, requires_grad=True)\nw.normal_()\n"


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "train.py").write_text(BUGGY, encoding="utf-8")
    (tmp_path / "broken.py").write_text("import torch\ndef f(:\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GRADFIX_NO_CACHE", raising=False)
    return tmp_path


def count_lints(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    real = gradfix.runner.process_text

    def counting(text, path, options, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(path)
        return real(text, path, options, **kwargs)

    monkeypatch.setattr(gradfix.runner, "process_text", counting)
    return calls


def test_a_rerun_over_an_unchanged_tree_reads_the_cache(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = invoke("check", "-j", "1", ".")
    assert (project / ".gradfix_cache" / ".gitignore").read_text().endswith("*\n")
    calls = count_lints(monkeypatch)
    second = invoke("check", "-j", "1", ".")
    assert second == first and calls == []  # same output, errors included, nothing linted
    (project / "train.py").write_text(BUGGY + "w.zero_()\n", encoding="utf-8")
    code, out, _ = invoke("check", "-j", "1", ".")
    assert calls == ["train.py"] and out.count("GF201") == 2


def test_options_and_rules_are_part_of_the_key(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    invoke("check", "-j", "1", "train.py")
    calls = count_lints(monkeypatch)
    code, out, _ = invoke("fix", "-j", "1", "train.py")  # fix: another entry
    assert calls == ["train.py"] and "+    w.normal_()" in out
    invoke("check", "-j", "1", "--select", "GF1", "train.py")
    assert calls == ["train.py", "train.py"]
    code, out, _ = invoke("fix", "-j", "1", "train.py")  # the fix preview from the cache
    assert calls == ["train.py", "train.py"] and "+    w.normal_()" in out


def test_no_cache_neither_reads_nor_writes(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    invoke("check", "--no-cache", "-j", "1", ".")
    assert not (project / ".gradfix_cache").exists()
    invoke("check", "-j", "1", ".")
    calls = count_lints(monkeypatch)
    invoke("check", "--no-cache", "-j", "1", ".")
    assert sorted(calls) == ["broken.py", "train.py"]


def test_write_goes_through_the_cache_and_still_writes(project: Path) -> None:
    invoke("fix", "-j", "1", "train.py")  # caches the fixed text
    code, _, _ = invoke("fix", "--write", "--no-verify", "-j", "1", "train.py")
    assert "with torch.no_grad():\n    w.normal_()\n" in (project / "train.py").read_text()
    assert code == 0


def test_an_unreadable_cache_entry_is_a_miss(project: Path) -> None:
    invoke("check", "-j", "1", "train.py")
    for entry in (project / ".gradfix_cache").rglob("*.json"):
        entry.write_text("{not json", encoding="utf-8")
    code, out, _ = invoke("check", "-j", "1", "train.py")
    assert code == 1 and "GF201" in out
    for entry in (project / ".gradfix_cache").rglob("*.json"):
        entry.write_text('{"findings": [{"line": 1}], "fixes": []}', encoding="utf-8")
    code, out, _ = invoke("fix", "-j", "1", "train.py")  # another layout
    assert code == 1 and "+    w.normal_()" in out


def test_the_key_changes_with_the_installed_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An editable install that changed must not serve results of the old code."""
    import gradfix.cache

    gradfix.cache.gradfix_version.cache_clear()
    before = gradfix.cache.cache_key("x", ["GF101"])
    real_stat = gradfix.cache.os.stat

    def later(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        result = real_stat(path, *args, **kwargs)
        if str(path).endswith("engine.py"):
            return type("Stat", (), {"st_size": result.st_size, "st_mtime_ns": 1})()
        return result

    monkeypatch.setattr(gradfix.cache.os, "stat", later)
    gradfix.cache.gradfix_version.cache_clear()
    try:
        after = gradfix.cache.cache_key("x", ["GF101"])
    finally:
        monkeypatch.undo()
        gradfix.cache.gradfix_version.cache_clear()
    assert before != after


CLEAN = "import torch\nw = torch.randn(3, requires_grad=True)\n(w * 2).sum().backward()\n"


def count_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    reads: list[str] = []
    real = gradfix.runner.read_source

    def counting(path, *args):  # type: ignore[no-untyped-def]
        reads.append(path)
        return real(path, *args)

    monkeypatch.setattr(gradfix.runner, "read_source", counting)
    return reads


def test_a_warm_run_does_not_read_files_known_clean(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (project / "clean.py").write_text(CLEAN, encoding="utf-8")
    (project / "gen.py").write_text("# @" + "generated\nimport torch\n", encoding="utf-8")
    first = invoke("check", "-j", "1", ".")
    reads = count_reads(monkeypatch)
    second = invoke("check", "-j", "1", ".")
    assert second == first
    # clean.py and gen.py are not read; files with findings or errors always are
    assert sorted(reads) == ["broken.py", "train.py"]


def test_a_changed_clean_file_is_read_again(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clean = project / "clean.py"
    clean.write_text(CLEAN, encoding="utf-8")
    invoke("check", "-j", "1", "clean.py")
    reads = count_reads(monkeypatch)
    clean.write_text(CLEAN.replace("(w * 2)", "w.normal_()\n(w * 3)"), encoding="utf-8")
    code, out, _ = invoke("check", "-j", "1", "clean.py")
    assert reads == ["clean.py"] and code == 1 and "GF201" in out
    reads.clear()
    invoke("check", "-j", "1", "clean.py")
    assert reads == ["clean.py"]  # it has a finding now: never taken from the clean index


def test_the_clean_index_depends_on_the_rules(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (project / "clean.py").write_text(CLEAN, encoding="utf-8")
    invoke("check", "-j", "1", "--select", "GF101", "clean.py")
    reads = count_reads(monkeypatch)
    invoke("check", "-j", "1", "--select", "GF201", "clean.py")
    assert reads == ["clean.py"]
    reads.clear()
    invoke("check", "-j", "1", "--select", "GF201", "clean.py")
    assert reads == []


def test_a_file_skipped_for_its_size_is_checked_once_the_limit_is_raised(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (project / "clean.py").write_text(CLEAN, encoding="utf-8")
    code, _, err = invoke("check", "-j", "1", "--config", "max-file-size=10", "clean.py")
    assert "skipped" in err
    reads = count_reads(monkeypatch)
    code, _, err = invoke("check", "-j", "1", "clean.py")
    assert reads == ["clean.py"] and "skipped" not in err and code == 0


#: a GF201 finding without a fix (the leaf was used in the graph before the update)
NO_FIX = (
    "import torch\nw = torch.tensor([1.], requires_grad=True)\ny = w * 2\nw.add_(1)\ny.backward()\n"
)


def test_fix_after_check_lints_only_the_files_with_fixes(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One cache for check and fix: the findings of ``check`` tell which files ``fix``
    would leave unchanged (no finding, or none with a fix), so only the others are
    linted again (129 s for ``fix`` after a warm ``check`` on timm + diffusers)."""
    (project / "clean.py").write_text(CLEAN, encoding="utf-8")
    (project / "nofix.py").write_text(NO_FIX, encoding="utf-8")
    cold = invoke("fix", "--no-cache", "-j", "1", ".")
    invoke("check", "-j", "1", ".")
    reads, lints = count_reads(monkeypatch), count_lints(monkeypatch)
    warm = invoke("fix", "-j", "1", ".")
    assert warm == cold
    assert sorted(reads) == ["broken.py", "nofix.py", "train.py"]  # clean.py: not read
    assert lints == ["train.py"]  # the only file with a fix
    lints.clear()
    assert invoke("fix", "-j", "1", ".") == cold and lints == []  # the fix is cached too
    assert invoke("check", "-j", "1", ".")[1].count("GF201") == 2 and lints == []
    invoke("fix", "--unsafe-fixes", "-j", "1", ".")
    assert lints == ["train.py"]  # unsafe fixes: another fixed text, same entry
