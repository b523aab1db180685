"""The content-hash result cache (.gradfix_cache)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
    # the key that signs entries: the user's, outside the project (one per test here)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path.parent / f"{tmp_path.name}-user-cache"))
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


POISON = "import os\nos.system('echo pwned > pwned.txt')\n"
#: nested deeper than the interpreter's recursion limit (RecursionError in json.loads)
DEEP_TEXT = "[" * 100_000 + "]" * 100_000


def entry_files(project: Path) -> list[Path]:
    """The content-hash entries (in sub-folders; the clean index is at the top)."""
    files = list((project / ".gradfix_cache").glob("*/*.json"))
    assert files
    return files


def signed_name(path: Path) -> str:
    """What a file of the cache is signed as: an entry's key, the clean index's name."""
    return path.name if path.parent.name == ".gradfix_cache" else path.name[: -len(".json")]


def edit_entries(project: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Apply ``change`` to each entry and store it in its layout, signed with the user's
    own key where entries are signed: what only a bug could write, so the fields are
    checked even when the digest matches."""
    import gradfix.cache

    for path in entry_files(project):
        stored = json.loads(path.read_text(encoding="utf-8"))
        signed = "payload" in stored
        entry = json.loads(stored["payload"]) if signed else stored
        change(entry)
        text = json.dumps(entry)
        if signed:
            text = str(gradfix.cache.sign(signed_name(path), text))
        path.write_text(text, encoding="utf-8")


def poison_fixed_text(entry: dict[str, Any]) -> None:
    entry["fixes"]["safe"]["text"] = POISON


def test_an_edited_entry_is_never_written(project: Path) -> None:
    """Anyone who can write the project's folder (a checked-in cache, a shared tree) can
    edit an entry, but not sign it with the user's key: the entry is a miss, and ``fix
    --write --no-verify`` writes the fix computed again."""
    invoke("fix", "-j", "1", "train.py")  # caches the fixed text
    for path in entry_files(project):
        stored = json.loads(path.read_text(encoding="utf-8"))
        entry = json.loads(stored["payload"]) if "payload" in stored else stored
        poison_fixed_text(entry)
        path.write_text(json.dumps(entry), encoding="utf-8")  # unsigned, as an attacker
        digest = hashlib.sha256(json.dumps(entry).encode()).hexdigest()  # a guessed digest
        forged = {"gradfix_cache": 2, "digest": digest, "payload": json.dumps(entry)}
        (path.parent / "forged").write_text(json.dumps(forged), encoding="utf-8")
    code, _, _ = invoke("fix", "--write", "--no-verify", "-j", "1", "train.py")
    assert code == 0 and "os.system" not in (project / "train.py").read_text()
    assert "with torch.no_grad():\n    w.normal_()\n" in (project / "train.py").read_text()
    (project / "train.py").write_text(BUGGY, encoding="utf-8")
    for path in entry_files(project):
        path.write_text((path.parent / "forged").read_text(), encoding="utf-8")
    code, _, _ = invoke("fix", "--write", "--no-verify", "-j", "1", "train.py")
    assert code == 0 and "os.system" not in (project / "train.py").read_text()


def test_an_entry_of_another_source_is_a_miss(project: Path) -> None:
    """An entry holds the hash of the source its fixed text derives from."""
    invoke("fix", "-j", "1", "train.py")

    def other_source(entry: dict[str, Any]) -> None:
        poison_fixed_text(entry)
        entry["source"] = hashlib.sha256(b"something else").hexdigest()

    edit_entries(project, other_source)
    code, _, _ = invoke("fix", "--write", "--no-verify", "-j", "1", "train.py")
    assert code == 0 and "os.system" not in (project / "train.py").read_text()


def set_finding(field: str, value: object) -> Callable[[dict[str, Any]], None]:
    def change(entry: dict[str, Any]) -> None:
        entry["findings"][0][field] = value

    return change


@pytest.mark.parametrize(
    "change",
    [
        set_finding("line", "abc"),
        set_finding("line", -5),
        set_finding("col", True),
        set_finding("code", "GF999"),
        set_finding("fix", ["harmless", "x"]),
        set_finding("cell", "2"),
        set_finding("message", {"a": 1}),
        lambda entry: entry.update(findings="abc"),
        lambda entry: entry.update(error=3),
        lambda entry: entry.update(open_callers=[1]),
        lambda entry: entry["fixes"].update(safe={"text": 5}),
        lambda entry: entry["fixes"]["safe"].update(dropped=None),
        lambda entry: entry["fixes"]["safe"].update(applied="2"),
    ],
    ids=[
        "line-text",
        "line-negative",
        "col-bool",
        "unknown-code",
        "unknown-safety",
        "cell-text",
        "message-object",
        "findings-text",
        "error-number",
        "callers-numbers",
        "fixed-text-number",
        "dropped-none",
        "applied-text",
    ],
)
def test_an_entry_with_a_wrong_field_is_a_miss(
    project: Path, change: Callable[[dict[str, Any]], None]
) -> None:
    """Wrong types are never shown as locations (``m.py:abc:1``) nor codes (``GF999``),
    nor end the run: the file is linted again."""
    cold_check = invoke("check", "-j", "1", "train.py")
    cold_fix = invoke("fix", "-j", "1", "train.py")  # the same entry, with the fixed text
    edit_entries(project, change)
    assert invoke("check", "-j", "1", "train.py") == cold_check
    assert invoke("fix", "-j", "1", "train.py") == cold_fix
    assert invoke("fix", "-j", "1", "train.py") == cold_fix  # the entry was overwritten


def test_a_deeply_nested_entry_or_index_is_a_miss(project: Path) -> None:
    """JSON nested deeper than the recursion limit: no ``internal error: RecursionError``."""
    (project / "clean.py").write_text(CLEAN, encoding="utf-8")
    cold = invoke("check", "-j", "1", ".")
    for path in (project / ".gradfix_cache").rglob("*.json"):
        path.write_text(DEEP_TEXT, encoding="utf-8")
    assert invoke("check", "-j", "1", ".") == cold
    import gradfix.cache

    if hasattr(gradfix.cache, "sign"):  # signed with the user's key: the payload is read
        for path in (project / ".gradfix_cache").rglob("*.json"):
            path.write_text(str(gradfix.cache.sign(signed_name(path), DEEP_TEXT)), encoding="utf-8")
        assert invoke("check", "-j", "1", ".") == cold


def test_without_a_key_there_is_no_cache(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No user cache directory to keep the key in: entries could not be trusted, so none
    is written or read, and the run is the same."""
    blocked = project.parent / f"{project.name}-not-a-folder"
    blocked.write_text("", encoding="utf-8")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    cold = invoke("check", "--no-cache", "-j", "1", ".")
    assert invoke("check", "-j", "1", ".") == cold
    assert not list(project.rglob("*.json"))


def test_the_key_is_the_users_own_and_created_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Created on first use, readable by the user alone; a second process that starts
    at the same time finds it and uses the same key."""
    import stat

    import gradfix.cache

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))
    path = gradfix.cache.secret_path()
    first = gradfix.cache.cache_secret()
    assert first is not None and len(first) >= 32
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    gradfix.cache._secret_at.cache_clear()  # another process
    assert gradfix.cache.cache_secret() == first
    assert sorted(os.listdir(os.path.dirname(path))) == ["cache-secret"]  # no temporary left
