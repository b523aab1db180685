"""Bad input, one test each: a clear one-line message naming the file, the run goes on for
the other files, and nothing is lost or half-written.

Every test runs ``gradfix`` (typer's CliRunner, or a subprocess where a signal, a hang or
dropped privileges are involved) over a bad file next to a good one that really has a fix
(``fixtures/leaf_inplace/manual_sgd_loop``), mostly with ``fix --write``, and checks the
stderr line, the exit status, that the good file is fixed and that the bad one is
byte-for-byte as it was. Unit tests of decoding and atomic writing are in test_files.py.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import gradfix.runner
from gradfix.cli import app
from gradfix.fileio.files import MAX_FILE_BYTES

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "leaf_inplace"
#: a GF201 pitfall (``w -= lr * w.grad`` on a leaf) and what ``fix`` makes of it
BEFORE = (FIXTURES / "manual_sgd_loop.before.py").read_text(encoding="utf-8")
AFTER = (FIXTURES / "manual_sgd_loop.after.py").read_text(encoding="utf-8")
SYNTAX_ERROR = "import torch\nx = torch.tensor([1,\n"


def invoke(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


def gradfix_process(*args: str, prefix: tuple[str, ...] = ()) -> list[str]:
    """The command line of ``gradfix ARGS`` in a subprocess (optionally behind ``prefix``)."""
    return [*prefix, sys.executable, "-m", "gradfix", *args]


def write(directory: Path, name: str, data: str | bytes) -> Path:
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return path


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory with ``good.py``, which ``fix --write`` must always fix."""
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "good.py", BEFORE)
    return tmp_path


def assert_good_file_fixed(project: Path) -> None:
    assert (project / "good.py").read_text(encoding="utf-8") == AFTER


def assert_no_stray_files(project: Path, *expected: str) -> None:
    """No temporary file is left behind by an atomic write that did not happen."""
    names = {path.name for path in project.iterdir()}
    assert names == {"good.py", *expected}


def fix_write_with(project: Path, name: str, data: bytes, message: str) -> None:
    """``fix --write .`` over ``good.py`` and the bad file ``name``: one error line, exit
    2, the good file fixed, the bad one untouched."""
    bad = write(project, name, data)
    result = invoke("fix", "--write", "--no-verify", ".")
    assert result.exit_code == 2
    [line] = result.stderr.splitlines()[:-1]  # the last line is the summary
    assert line.startswith(f"{name}: {message}"), line
    assert result.stderr.splitlines()[-1] == (
        "Fixed 2 findings in 1 file. 1 file could not be processed."
    )
    assert result.stdout == ""
    assert bad.read_bytes() == data
    assert_good_file_fixed(project)
    assert_no_stray_files(project, name)
    checked = invoke("check", ".")
    assert checked.exit_code == 2
    assert checked.stderr == f"{line}\n"
    assert checked.stdout == "No findings. 1 file could not be processed.\n"


# --- what cannot be parsed or decoded ------------------------------------------------------------


def test_syntax_error(project: Path) -> None:
    fix_write_with(
        project, "bad.py", SYNTAX_ERROR.encode(), "syntax error at line 2: '[' was never closed"
    )


@pytest.mark.parametrize(
    ("source", "line"),
    [
        ('import torch\nprint "loss", 1\n', 2),
        ("try:\n    import torch\nexcept ImportError, error:\n    pass\n", 3),
        ("import os\nos.chmod('run.py', 0755)\n", 2),
    ],
    ids=["print-statement", "except-comma", "octal"],
)
def test_python2_file(project: Path, source: str, line: int) -> None:
    fix_write_with(project, "legacy.py", source.encode(), f"syntax error at line {line}: ")
    result = invoke("check", "legacy.py")
    assert result.stderr.rstrip("\n").endswith(
        "(this looks like Python 2: gradfix reads Python 3; port the file or exclude it)"
    )


def test_no_python2_hint_on_other_syntax_errors(project: Path) -> None:
    write(project, "bad.py", SYNTAX_ERROR)
    assert "Python 2" not in invoke("check", "bad.py").stderr


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"import torch\nname = 'caf\xe9'\n", "cannot decode as utf-8: invalid continuation byte "),
        (b"# coding: klingon\nx = 1\n", "cannot decode: unknown encoding"),
    ],
    ids=["latin-1-without-cookie", "unknown-cookie"],
)
def test_undecodable_bytes(project: Path, data: bytes, message: str) -> None:
    fix_write_with(project, "bytes.py", data, message)


@pytest.mark.parametrize(
    "data",
    [
        b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x10",
        b"\x7fELF\x02\x01\x01\x00\x00\x00",
    ],
    ids=["png", "elf"],
)
def test_binary_file_named_py(project: Path, data: bytes) -> None:
    fix_write_with(
        project, "image.py", data, "binary file (it contains NUL bytes); not a Python source"
    )


# --- what must survive a fix byte for byte -------------------------------------------------------


def test_utf8_bom_is_kept(project: Path) -> None:
    path = write(project, "bom.py", b"\xef\xbb\xbf" + BEFORE.encode())
    result = invoke("fix", "--write", "--no-verify", "bom.py", "good.py")
    assert (result.exit_code, result.stdout) == (0, "")
    assert path.read_bytes() == b"\xef\xbb\xbf" + AFTER.encode()
    assert_good_file_fixed(project)


def crlf(text: str) -> str:
    return text.replace("\n", "\r\n")


def no_final_newline(text: str) -> str:
    return text.rstrip("\n")


@pytest.mark.parametrize(
    "change", [crlf, no_final_newline, lambda text: crlf(no_final_newline(text))]
)
def test_crlf_and_a_missing_final_newline_are_kept(project: Path, change) -> None:  # type: ignore[no-untyped-def]
    path = write(project, "m.py", change(BEFORE))
    assert invoke("fix", "--write", "--no-verify", "m.py").exit_code == 0
    assert path.read_bytes() == change(AFTER).encode()


def test_mixed_newlines_keep_each_line_s_own_ending(project: Path) -> None:
    """Odd lines end in CRLF, even ones in LF; every line of the original keeps its own
    ending after the fix (an inserted line takes the ending of the file's first line)."""
    lines = BEFORE.splitlines()
    mixed = [line + ("\r\n" if number % 2 else "\n") for number, line in enumerate(lines, 1)]
    path = write(project, "mixed.py", "".join(mixed))
    assert invoke("fix", "--write", "--no-verify", "mixed.py").exit_code == 0
    fixed = path.read_bytes().decode().splitlines(keepends=True)
    assert [line.strip() for line in fixed] == [line.strip() for line in AFTER.splitlines(True)]
    endings = {line.strip(): line[len(line.rstrip("\r\n")) :] for line in fixed if line.strip()}
    for original in mixed:
        if original.strip():
            assert endings[original.strip()] == original[len(original.rstrip("\r\n")) :]


def test_tab_indentation_is_kept(project: Path) -> None:
    def tabs(text: str) -> str:
        return "\n".join(
            "\t" * ((len(line) - len(line.lstrip(" "))) // 4) + line.lstrip(" ")
            for line in text.split("\n")
        )

    assert "\t\tw -= lr * w.grad" in tabs(AFTER)
    path = write(project, "tabs.py", tabs(BEFORE))
    assert invoke("fix", "--write", "--no-verify", "tabs.py").exit_code == 0
    assert path.read_text(encoding="utf-8") == tabs(AFTER)


# --- what is not read ----------------------------------------------------------------------------


def test_a_file_larger_than_5_mb_is_skipped_with_a_note(project: Path) -> None:
    """Not parsed: the big file starts with a syntax error that would be reported. A skip is
    a note, not an error: the exit status is that of the other files."""
    padding = b"# " + b"x" * 97 + b"\n"
    data = SYNTAX_ERROR.encode() + padding * 51_000
    assert len(data) > MAX_FILE_BYTES == 5_000_000
    big = write(project, "big.py", data)
    result = invoke("fix", "--write", "--no-verify", ".")
    assert result.exit_code == 0
    assert result.stderr.splitlines() == [
        "big.py: skipped: the file is larger than 5 MB (5.1 MB); "
        "raise max-file-size in [tool.gradfix] to check it",
        "Fixed 2 findings in 1 file.",
    ]
    assert big.read_bytes() == data
    assert_good_file_fixed(project)


def test_the_size_limit_is_configurable(project: Path) -> None:
    write(project, "small.py", BEFORE)
    result = invoke("check", "--config", "max-file-size=100", "--format", "concise", ".")
    assert result.exit_code == 2  # every file too large: nothing was checked
    assert result.stdout == ""
    assert result.stderr.startswith("good.py: skipped: the file is larger than 0.0001 MB")
    assert invoke("check", "--config", "max-file-size=0", ".").exit_code == 1
    bad = invoke("check", "--config", "max-file-size=-1", ".")
    assert bad.exit_code == 2
    assert bad.stderr == "error: --config: max-file-size must be a number of bytes (0: no limit)\n"


@pytest.mark.parametrize("command", ["check", "fix", "fix --write --no-verify"])
def test_when_no_file_could_be_checked_no_pass_is_claimed(project: Path, command: str) -> None:
    """Every named file skipped (too large) or unreadable (binary, a syntax error): one
    line says nothing was checked, never "All checks passed." / "Nothing to fix.", and the
    exit status is 2: CI must not pass code gradfix could not read."""
    write(project, "big.py", b"x = 1\n" * 900_000)
    write(project, "blob.py", b"\x00\x01binary")
    write(project, "broken.py", SYNTAX_ERROR)
    summary = "check" if command == "check" else "fix"
    for names, line in [
        (["big.py"], "Nothing was checked: 1 file larger than max-file-size."),
        (
            ["big.py", "blob.py", "broken.py"],
            "Nothing was checked: 2 files could not be processed, 1 file larger than "
            "max-file-size.",
        ),
    ]:
        result = invoke(*command.split(), "--config", "max-file-size=5000000", *names)
        assert result.exit_code == 2, result.output
        out = result.stdout if summary == "check" else result.stderr
        assert out.splitlines()[-1] == line
        assert "passed" not in result.output and "Nothing to fix" not in result.output
    # one file checked, the other too large: the note leaves the exit status alone
    assert invoke(*command.split(), "big.py", "good.py").exit_code == (
        0 if "--write" in command else 1
    )


def test_no_file_checked_is_said_on_stderr_beside_a_machine_format(project: Path) -> None:
    write(project, "big.py", b"x = 1\n" * 900_000)
    result = invoke("check", "--format", "json", "big.py")
    assert (result.exit_code, result.stdout) == (2, "[]\n")
    assert result.stderr.splitlines()[-1] == (
        "Nothing was checked: 1 file larger than max-file-size."
    )
    assert invoke("check", "--format", "json", "--quiet", "big.py").stderr == ""

    # pre-commit names excluded files: leaving them out is what was asked, not a failure
    (project / "pyproject.toml").write_text('[tool.gradfix]\nexclude = ["good.py"]\n')
    assert invoke("check", "good.py").exit_code == 0


def test_symlink_loops_end_discovery_with_one_line_each(project: Path) -> None:
    """A directory link to its parent (never followed) is a warning; a file link loop
    a -> b -> a is one error line per name. In a subprocess: a loop would hang."""
    (project / "pkg").mkdir()
    os.symlink("..", project / "pkg" / "up")
    os.symlink("b.py", project / "a.py")
    os.symlink("a.py", project / "b.py")
    result = subprocess.run(
        gradfix_process("fix", "--write", "--no-verify", "--no-cache", "."),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "warning: pkg/up: symbolic link to an enclosing directory (a loop); not followed",
        "a.py: symbolic link loop (it never reaches a file); skipped",
        "b.py: symbolic link loop (it never reaches a file); skipped",
        "Fixed 2 findings in 1 file. 2 files could not be processed.",
    ]
    assert_good_file_fixed(project)
    assert os.readlink(project / "a.py") == "b.py"


def test_what_gitignore_or_exclude_hides_is_not_reported(project: Path) -> None:
    """A broken link or a FIFO in an ignored directory is skipped like any file there."""
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    (project / ".gitignore").write_text("out/\n", encoding="utf-8")
    for directory in ("out", "legacy"):
        (project / directory).mkdir()
        os.symlink("gone.py", project / directory / "dangling.py")
        os.mkfifo(project / directory / "pipe.py")
    result = invoke("fix", "--write", "--no-verify", "--config", "exclude=['legacy']", ".")
    assert (result.exit_code, result.stderr) == (0, "Fixed 2 findings in 1 file.\n")
    assert_good_file_fixed(project)


def _without_file_permission_override() -> tuple[str, ...] | None:
    """A prefix that runs a command without root's right to read any file (Linux
    capabilities ``dac_override`` / ``dac_read_search``); () when not root."""
    if os.geteuid() != 0:
        return ()
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    prefix = (setpriv, "--bounding-set", "-dac_override,-dac_read_search")
    probe = subprocess.run([*prefix, "true"], capture_output=True)
    return prefix if probe.returncode == 0 else None


def test_unreadable_file(project: Path) -> None:
    prefix = _without_file_permission_override()
    if prefix is None:
        pytest.skip("running as root without setpriv: every file is readable")
    secret = write(project, "secret.py", BEFORE)
    secret.chmod(0)
    result = subprocess.run(
        gradfix_process("fix", "--write", "--no-verify", "--no-cache", ".", prefix=prefix),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "secret.py: permission denied",
        "Fixed 2 findings in 1 file. 1 file could not be processed.",
    ]
    secret.chmod(0o600)
    assert secret.read_text(encoding="utf-8") == BEFORE
    assert_good_file_fixed(project)


def test_a_fifo_named_py_is_not_read(project: Path) -> None:
    """Opening a FIFO without a writer blocks forever: it must be refused, not read."""
    os.mkfifo(project / "pipe.py")
    result = subprocess.run(
        gradfix_process("fix", "--write", "--no-verify", "--no-cache", "."),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines()[0] == "pipe.py: not a regular file (a FIFO); skipped"
    assert_good_file_fixed(project)
    assert stat.S_ISFIFO(os.lstat(project / "pipe.py").st_mode)


# --- what is not written -------------------------------------------------------------------------


def test_read_only_file_under_write(project: Path) -> None:
    """A read-only file is not replaced, even though the directory would allow it (and
    even as root)."""
    locked = write(project, "locked.py", BEFORE)
    locked.chmod(0o444)
    result = invoke("fix", "--write", "--no-verify", ".")
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0] == (
        "locked.py: not written: the file is read-only (make it writable to fix it)"
    )
    assert result.stdout.startswith("locked.py:16:5: GF201 ")  # its findings remain
    assert locked.read_text(encoding="utf-8") == BEFORE
    assert stat.S_IMODE(locked.stat().st_mode) == 0o444
    assert_good_file_fixed(project)
    assert_no_stray_files(project, "locked.py")


def test_a_file_changed_on_disk_between_read_and_write_is_not_clobbered(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    read_source = gradfix.runner.read_source
    edited = BEFORE + "# saved in the editor meanwhile\n"

    def read_then_edit(name: str, *args: int):  # type: ignore[no-untyped-def]
        source = read_source(name, *args)
        if name.endswith("edited.py"):
            Path(name).write_text(edited, encoding="utf-8")
        return source

    write(project, "edited.py", BEFORE)
    monkeypatch.setattr(gradfix.runner, "read_source", read_then_edit)
    result = invoke("fix", "--write", "--no-verify", "--jobs", "1", ".")
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0] == (
        "edited.py: changed on disk while gradfix was running; not overwritten, run again"
    )
    assert (project / "edited.py").read_text(encoding="utf-8") == edited
    assert_good_file_fixed(project)


def test_a_failed_write_leaves_the_file_and_no_temporary(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def disk_full(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", disk_full)
    result = invoke("fix", "--write", "--no-verify", "good.py")
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0] == "good.py: cannot write: No space left on device"
    assert (project / "good.py").read_text(encoding="utf-8") == BEFORE
    assert_no_stray_files(project)


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_ctrl_c_during_write_leaves_no_half_written_file(tmp_path: Path, jobs: str) -> None:
    """SIGINT to the process group (what Ctrl-C does) once the first file is written:
    every file is then either its original bytes or the complete fix, no temporary file
    is left, and gradfix says so in one line and exits 130."""
    count = 2000  # enough that the interrupt lands before the last write, however fast
    originals = {f"m{i:04}.py": BEFORE + f"# {i}\n" for i in range(count)}
    for name, text in originals.items():
        write(tmp_path, name, text)
    process = subprocess.Popen(
        gradfix_process(
            "fix", "--write", "--no-verify", "--no-cache", "--jobs", jobs, str(tmp_path)
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        _wait_for_a_written_file(tmp_path, originals, process)
        os.killpg(process.pid, signal.SIGINT)
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert stderr.decode().splitlines() == [
        "gradfix: interrupted; files already fixed are complete, the others unchanged"
    ]
    assert process.returncode == 130
    contents = {path.name: path.read_text(encoding="utf-8") for path in tmp_path.iterdir()}
    assert set(contents) == set(originals)
    fixed = [name for name, text in contents.items() if text != originals[name]]
    for name in fixed:
        assert contents[name] == AFTER + originals[name][len(BEFORE) :]
    assert 0 < len(fixed) < count  # interrupted in the middle of the batch


def _wait_for_a_written_file(
    directory: Path, originals: dict[str, str], process: subprocess.Popen[bytes]
) -> None:
    """Returns once a file is written: its size changed, or the folder changed twice (a
    write makes its temporary file there, then renames it over the file). One stat a poll
    is fast enough on a loaded machine, where scanning the files one by one could miss
    the whole burst of writes."""
    deadline = time.monotonic() + 120
    listed, changes = directory.stat().st_mtime_ns, 0
    sizes = [(directory / name, len(text.encode())) for name, text in originals.items()]
    polls = 0
    while time.monotonic() < deadline:
        now = directory.stat().st_mtime_ns
        if now != listed:
            listed, changes = now, changes + 1
            if changes >= 2:
                return
        polls += 1
        if polls % 200 == 0 and any(path.stat().st_size != size for path, size in sizes):
            return
        if process.poll() is not None:
            pytest.fail(f"gradfix ended before any file was written: {process.returncode}")
        time.sleep(0.001)
    pytest.fail("no file was written within 120 s")


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        (["check", "good.py"], "no file was changed"),
        (["check", "--format", "json", "."], "no file was changed"),
        (["fix", "good.py"], "no file was changed"),  # a preview
        (["fix", "-qw", "--no-verify", "."], "files already fixed are complete"),
        (["check", "--add-noqa", "."], "files already given their noqa comments are complete"),
    ],
)
def test_ctrl_c_says_what_the_command_left_on_disk(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    arguments: list[str], said: str,
) -> None:  # fmt: skip
    """A check fixes nothing: Ctrl-C during one does not speak of fixed files."""
    import gradfix.cli

    def interrupted(*_: object, **__: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(gradfix.runner, "process_paths", interrupted)
    monkeypatch.setattr(sys, "argv", ["gradfix", *arguments])
    with pytest.raises(SystemExit) as exit_:
        gradfix.cli.main()
    assert exit_.value.code == 130
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"gradfix: interrupted; {said}"), line
    assert (project / "good.py").read_text(encoding="utf-8") == BEFORE
