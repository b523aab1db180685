"""Discovery, decoding and atomic writing (gradfix.fileio.files)."""

from __future__ import annotations

import os
import signal
import stat
import tempfile
from pathlib import Path

import pytest

from gradfix.fileio.files import (
    Candidate,
    FileError,
    decode_source,
    discover,
    encode_source,
    read_source,
    write_source,
)


def touch(path: Path, data: bytes = b"x = 1\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


# --- discovery ---------------------------------------------------------------------------


def test_directories_yield_sorted_python_files_recursively(tmp_path: Path) -> None:
    for name in ["b.py", "a.py", "pkg/z.py", "pkg/sub/c.py", "notes.txt", "stub.pyi"]:
        touch(tmp_path / name)
    paths = [c.path for c in discover([str(tmp_path)])]
    relative = [os.path.relpath(p, tmp_path) for p in paths]
    assert relative == ["a.py", "b.py", "pkg/sub/c.py", "pkg/z.py"]


@pytest.mark.parametrize(
    "directory",
    [
        ".hidden",
        ".git",
        "__pycache__",
        "venv",
        ".venv",
        "node_modules",
        "build",
        "dist",
        "lib/site-packages",
    ],
)
def test_excluded_directories_are_skipped(tmp_path: Path, directory: str) -> None:
    touch(tmp_path / "keep.py")
    touch(tmp_path / directory / "skipped.py")
    paths = [c.path for c in discover([str(tmp_path)])]
    assert [os.path.basename(p) for p in paths] == ["keep.py"]


def test_an_explicit_directory_is_walked_whatever_its_name(tmp_path: Path) -> None:
    touch(tmp_path / "build" / "gen.py")
    assert [c.path for c in discover([str(tmp_path / "build")])] == [
        str(tmp_path / "build" / "gen.py")
    ]


def test_explicit_files_are_taken_whatever_their_suffix(tmp_path: Path) -> None:
    script = touch(tmp_path / "train")
    assert discover([str(script)]) == [Candidate(str(script))]


def test_paths_print_as_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    touch(tmp_path / "src" / "m.py")
    touch(tmp_path / "top.py")
    monkeypatch.chdir(tmp_path)
    assert [c.path for c in discover(["."])] == [os.path.join("src", "m.py"), "top.py"]
    assert [c.path for c in discover(["src"])] == [os.path.join("src", "m.py")]
    assert [c.path for c in discover(["./top.py"])] == ["./top.py"]


def test_a_file_reached_twice_is_taken_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    touch(tmp_path / "a.py")
    monkeypatch.chdir(tmp_path)
    assert [c.path for c in discover(["a.py", ".", "./a.py"])] == ["a.py"]


def test_missing_path_is_an_error_and_empty_directory_a_warning(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    touch(tmp_path / "docs" / "readme.md")
    missing, empty = discover([str(tmp_path / "nope.py"), str(tmp_path / "docs")])
    assert missing.error == "no such file or directory"
    assert empty.warning == "no Python files found" and empty.error is None


def test_broken_symlink_is_an_error(tmp_path: Path) -> None:
    link = tmp_path / "dangling.py"
    link.symlink_to(tmp_path / "gone.py")
    assert discover([str(link)])[0].error == "broken symbolic link"


# --- reading -----------------------------------------------------------------------------


def test_utf8_with_crlf_and_no_final_newline_is_decoded_untouched() -> None:
    decoded = decode_source("a = 'é'\r\nb = 2\nc = 3".encode())
    assert decoded.text == "a = 'é'\r\nb = 2\nc = 3"
    assert decoded.encoding == "utf-8"


def test_bom_is_kept_out_of_the_text_and_put_back_on_encode() -> None:
    data = b"\xef\xbb\xbfimport torch\n"
    decoded = decode_source(data)
    assert decoded.text == "import torch\n"
    assert encode_source(decoded.text, decoded.encoding) == data


def test_pep263_cookie_selects_the_encoding() -> None:
    data = b"# -*- coding: latin-1 -*-\nname = 'caf\xe9'\n"
    decoded = decode_source(data)
    assert decoded.text.endswith("name = 'café'\n")
    assert encode_source(decoded.text, decoded.encoding) == data


def test_undecodable_file_names_the_line() -> None:
    with pytest.raises(FileError, match=r"^cannot decode as utf-8: .* at line 2 "):
        decode_source(b"import torch\nname = 'caf\xe9'\n")


def test_unknown_cookie_is_a_decode_error() -> None:
    with pytest.raises(FileError, match="^cannot decode: unknown encoding"):
        decode_source(b"# coding: klingon\nx = 1\n")


def test_binary_file_is_refused() -> None:
    with pytest.raises(FileError, match="^binary file"):
        decode_source(b"\x7fELF\x00\x01")


def test_read_source_errors_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(FileError, match="^no such file or directory$"):
        read_source(str(tmp_path / "missing.py"))


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads everything")
def test_unreadable_file(tmp_path: Path) -> None:
    path = touch(tmp_path / "secret.py")
    path.chmod(0)
    with pytest.raises(FileError, match="^permission denied$"):
        read_source(str(path))


# --- writing -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        b"a = 1\r\nb = 2\r\n",
        b"a = 1\r\nb = 2\nc = 3\r\n",
        b"a = 1\nb = 2",
        b"\xef\xbb\xbfa = 1\n",
        b"# coding: latin-1\ns = '\xe9'\n",
    ],
)
def test_writing_back_the_same_text_gives_the_same_bytes(tmp_path: Path, data: bytes) -> None:
    path = touch(tmp_path / "m.py", data)
    source = read_source(str(path))
    write_source(source, source.text)
    assert path.read_bytes() == data


def test_write_replaces_atomically_and_keeps_the_mode(tmp_path: Path) -> None:
    path = touch(tmp_path / "run.py", b"# coding: latin-1\na = '\xe9'\n")
    path.chmod(0o751)
    source = read_source(str(path))
    write_source(source, source.text.replace("a =", "b ="))
    assert path.read_bytes() == b"# coding: latin-1\nb = '\xe9'\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o751
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.py"]  # no temporary left


@pytest.mark.parametrize("when", ["after_mkstemp", "after_replace"])
def test_ctrl_c_anywhere_in_a_write_leaves_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    """Ctrl-C is a signal, raised as ``KeyboardInterrupt`` at whatever line runs: landing
    just after ``mkstemp`` created the temporary file (before any cleanup could know its
    name) or just after the rename, the file is whole (original or fixed, here fixed: the
    interrupt is held until the write ends), no temporary file is left, and the interrupt
    still reaches the caller."""
    path = touch(tmp_path / "m.py", b"a = 1\n")
    source = read_source(str(path))
    real_mkstemp, real_replace = tempfile.mkstemp, os.replace

    def interrupted_mkstemp(*args: object, **kwargs: object) -> tuple[int, str]:
        made = real_mkstemp(*args, **kwargs)  # type: ignore[call-overload]
        if when == "after_mkstemp":
            os.kill(os.getpid(), signal.SIGINT)
        return made

    def interrupted_replace(*args: str) -> None:
        real_replace(*args)
        if when == "after_replace":
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(tempfile, "mkstemp", interrupted_mkstemp)
    monkeypatch.setattr(os, "replace", interrupted_replace)
    with pytest.raises(KeyboardInterrupt):
        write_source(source, "a = 2\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.py"]
    assert path.read_bytes() == b"a = 2\n"


def test_a_file_changed_on_disk_is_not_clobbered(tmp_path: Path) -> None:
    path = touch(tmp_path / "m.py", b"a = 1\n")
    source = read_source(str(path))
    path.write_bytes(b"a = 2  # edited meanwhile\n")
    with pytest.raises(FileError, match="changed on disk"):
        write_source(source, "a = 3\n")
    assert path.read_bytes() == b"a = 2  # edited meanwhile\n"


def test_a_symlink_is_kept_and_its_target_written(tmp_path: Path) -> None:
    target = touch(tmp_path / "real.py", b"a = 1\n")
    link = tmp_path / "link.py"
    link.symlink_to(target)
    write_source(read_source(str(link)), "a = 2\n")
    assert link.is_symlink()
    assert target.read_bytes() == b"a = 2\n"


def test_text_the_encoding_cannot_hold_is_an_error(tmp_path: Path) -> None:
    path = touch(tmp_path / "m.py", b"# coding: latin-1\na = 1\n")
    source = read_source(str(path))
    with pytest.raises(FileError, match="^cannot encode the fixed source as iso8859-1"):
        write_source(source, source.text + "b = '\u2603'\n")
    assert path.read_bytes() == b"# coding: latin-1\na = 1\n"
