"""File I/O: find Python files, read them as text, write fixed text back safely.

Reading keeps everything needed to write the file back byte-for-byte where nothing
changed: the encoding (PEP 263 cookie, UTF-8 BOM) is detected with
:func:`tokenize.detect_encoding` and the bytes are decoded by hand, so newlines (``\\n``,
``\\r\\n``, mixed) and the presence of a final newline reach the engine untouched.

Writing is atomic: the new bytes go to a temporary file in the same directory, which is
fsynced, given the original file's mode and moved over the original with
:func:`os.replace`, so an interrupted run (Ctrl-C) leaves each file either as it was or
completely fixed. A file that changed on disk since it was read, or that is read-only,
is not overwritten.

Links are handled like ruff users expect of a formatter that never leaves the project: a
symbolic link is written through (its target is replaced, the link stays) only when the
target lies in the tree being fixed (:func:`write_tree`: the paths named, the project's
root); a link leading out of it is refused with one line. A file with other hard links is
refused too: the atomic rename gives the fixed name a new inode, which would leave the
other names on the old text, and writing in place could leave a torn file.

Discovery terminates on symbolic link loops (directory links are never followed; a link
back to an enclosing directory is reported once) and refuses what cannot be read as a
source without blocking: FIFOs, sockets and devices, broken links, link loops.

    source = read_source("model.py")
    write_source(source, fixed_text, tree=write_tree(["."]))  # FileError: one line
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import hashlib
import io
import os
import signal
import stat
import tempfile
import threading
import tokenize
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

#: Directory names never entered while walking a directory (an explicitly given
#: directory is always walked, whatever its name). Hidden directories are skipped too.
EXCLUDED_DIRS = frozenset(
    {"__pycache__", ".git", "venv", ".venv", "node_modules", "build", "dist", "site-packages"}
)
PYTHON_SUFFIX = ".py"
#: files larger than this are skipped with a note, not parsed: a source this big is data
#: or generated code (``max-file-size`` in ``[tool.gradfix]`` changes it; 0: no limit)
MAX_FILE_BYTES = 5_000_000
#: suffixes a directory walk takes: Python files and Jupyter notebooks
NOTEBOOK_SUFFIX = ".ipynb"
WALKED_SUFFIXES = (PYTHON_SUFFIX, NOTEBOOK_SUFFIX)


class FileError(Exception):
    """A file cannot be read, decoded or written. ``str()`` is a one-line message
    without the path (the caller prefixes it)."""


class FileTooLarge(FileError):
    """The file is larger than the size limit: it is skipped with a note, not an error."""


@dataclass(frozen=True)
class Candidate:
    """A path to process, or a path given by the user that yields nothing to process."""

    path: str
    #: one-line reason the path cannot be processed (it counts as an error)
    error: str | None = None
    #: one-line remark about a path that holds nothing to process (not an error)
    warning: str | None = None
    #: the file's device and inode when its ``stat`` was taken (one file, two names)
    identity: tuple[int, int] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class DecodedSource:
    text: str
    #: codec name from :func:`tokenize.detect_encoding` (``utf-8-sig`` when there is a BOM)
    encoding: str


@dataclass(frozen=True)
class SourceFile:
    """A file as read: its text, how to encode it back and how to recognise it on disk."""

    path: str
    text: str
    encoding: str
    digest: str
    mode: int


# --- discovery ---------------------------------------------------------------------------


def discover(paths: Iterable[str]) -> list[Candidate]:
    """Expand ``paths`` (files or directories) into the files to process, in order.

    A directory yields its ``*.py`` and ``*.ipynb`` files recursively, sorted, skipping hidden and
    :data:`EXCLUDED_DIRS` directories. An explicit file is always taken, whatever its
    suffix. A file reached twice (``. a.py``) is taken once, under its first name.
    """
    candidates: list[Candidate] = []
    seen: set[object] = set()
    for path in paths:
        for candidate in _expand(path):
            if candidate.error is None and candidate.warning is None:
                key = candidate.identity or _identity(candidate.path)
                if key in seen:
                    continue
                seen.add(key)
            candidates.append(candidate)
    return candidates


def _identity(path: str) -> object:
    """The file behind ``path``, whatever name reaches it (device and inode: one ``stat``,
    where ``realpath`` costs one ``lstat`` per path component)."""
    try:
        info = os.stat(path)
    except OSError:
        return os.path.realpath(path)
    return (info.st_dev, info.st_ino)


def _expand(path: str) -> Iterator[Candidate]:
    if os.path.isdir(path):
        files, loops = _walk(path)
        if not files:
            yield Candidate(path, warning="no Python files found")
        yield from (_candidate(file) for file in files)
        yield from (Candidate(link, warning=LOOP_WARNING) for link in loops)
    elif os.path.lexists(path):
        yield _candidate(path, explicit=True)
    else:
        yield Candidate(path, error="no such file or directory")


LOOP_WARNING = "symbolic link to an enclosing directory (a loop); not followed"


def walk_python_files(root: str) -> Iterator[str]:
    """The ``*.py`` and ``*.ipynb`` files under ``root``, sorted by path; symlinked
    directories are not followed."""
    yield from _walk(root)[0]


def _walk(root: str) -> tuple[list[str], list[str]]:
    """The files :func:`walk_python_files` yields, and the symbolic links to a directory
    enclosing them (never followed, so a loop cannot make the walk endless; reported so
    the user knows what was left out)."""
    found, loops = [], []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [name for name in dirnames if not is_excluded_dir(name)]
        found += [os.path.join(dirpath, name) for name in filenames if _is_walked(name)]
        loops += _links_to_enclosing(dirpath, dirnames)
    return sorted(map(_display_path, found)), sorted(map(_display_path, loops))


def _links_to_enclosing(dirpath: str, dirnames: list[str]) -> list[str]:
    links = [os.path.join(dirpath, name) for name in dirnames]
    links = [link for link in links if os.path.islink(link)]
    if not links:
        return []
    here = os.path.realpath(dirpath)
    return [link for link in links if _encloses(os.path.realpath(link), here)]


def _encloses(directory: str, path: str) -> bool:
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


def _candidate(path: str, *, explicit: bool = False) -> Candidate:
    """``path`` (a file found or named), or why it cannot be read as a source.

    A FIFO, socket or device would block or never end; a FIFO named on the command line
    is taken (``gradfix check <(git show HEAD:m.py)``)."""
    try:
        info = os.stat(path)
    except OSError as error:
        if error.errno == errno.ELOOP:
            return Candidate(path, error="symbolic link loop (it never reaches a file); skipped")
        if os.path.islink(path):
            return Candidate(path, error="broken symbolic link")
        return Candidate(path, error=_os_error_message(error))
    mode = info.st_mode
    if stat.S_ISREG(mode) or (explicit and stat.S_ISFIFO(mode)):
        return Candidate(path, identity=(info.st_dev, info.st_ino))
    return Candidate(path, error=f"not a regular file (a {_file_kind(mode)}); skipped")


def _file_kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "special file"


def is_notebook(path: str) -> bool:
    """A Jupyter notebook, by its name (:mod:`gradfix.notebook` reads it)."""
    return path.lower().endswith(NOTEBOOK_SUFFIX)


def _is_walked(name: str) -> bool:
    return name.endswith(WALKED_SUFFIXES)


def is_excluded_dir(name: str) -> bool:
    return name.startswith(".") or name in EXCLUDED_DIRS


def _display_path(path: str) -> str:
    """``./a.py`` -> ``a.py``: paths found under ``.`` print like ruff's."""
    prefix = "." + os.sep
    while path.startswith(prefix):
        path = path[len(prefix) :]
    return path


# --- reading -----------------------------------------------------------------------------


def read_source(path: str, max_bytes: int = 0) -> SourceFile:
    """Read and decode ``path``; raise :class:`FileError` with a one-line message, and
    :class:`FileTooLarge` without reading it when it has more than ``max_bytes`` (0: no
    limit)."""
    try:
        with open(path, "rb") as handle:
            status = os.fstat(handle.fileno())
            if max_bytes and status.st_size > max_bytes:
                raise FileTooLarge(too_large_message(status.st_size, max_bytes))
            data = handle.read()
    except OSError as error:
        raise FileError(_os_error_message(error)) from None
    mode = status.st_mode
    decoded = decode_source(data)
    return SourceFile(path, decoded.text, decoded.encoding, _digest(data), stat.S_IMODE(mode))


def too_large_message(size: int, limit: int) -> str:
    """``the file is larger than 5 MB (7.34 MB); raise max-file-size ... to check it``"""
    return (
        f"the file is larger than {_megabytes(limit)} ({_megabytes(size)}); "
        "raise max-file-size in [tool.gradfix] to check it"
    )


def _megabytes(size: int) -> str:
    return f"{size / 1_000_000:.3g} MB"


def decode_source(data: bytes) -> DecodedSource:
    """Decode Python source bytes like the interpreter does, newlines untouched."""
    if b"\0" in data:
        raise FileError("binary file (it contains NUL bytes); not a Python source, skipped")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as error:
        raise FileError(f"cannot decode: {error.msg}") from None
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise FileError(
            f"cannot decode as {_pretty_encoding(encoding)}: {error.reason} at line {line}"
            " (re-encode the file or declare its encoding, PEP 263)"
        ) from None
    return DecodedSource(text, encoding)


def encode_source(text: str, encoding: str) -> bytes:
    """The inverse of :func:`decode_source` (``utf-8-sig`` writes the BOM back)."""
    try:
        return text.encode(encoding)
    except UnicodeEncodeError as error:
        raise FileError(
            f"cannot encode the fixed source as {_pretty_encoding(encoding)}: {error.reason}"
        ) from None


def _pretty_encoding(encoding: str) -> str:
    return "utf-8" if encoding == "utf-8-sig" else codecs.lookup(encoding).name


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _os_error_message(error: OSError) -> str:
    if isinstance(error, FileNotFoundError):
        return "no such file or directory"
    if isinstance(error, PermissionError):
        return "permission denied"
    if isinstance(error, IsADirectoryError):
        return "is a directory"
    return f"cannot read: {error.strerror or error}"


# --- writing -----------------------------------------------------------------------------


def write_tree(paths: Iterable[str], root: str | None = None) -> tuple[str, ...]:
    """The real paths a run may write in: each path named (a directory, or a file: a
    link named on the command line is written through) and the project's ``root``."""
    named = [*paths, *([root] if root is not None else [])]
    return tuple(dict.fromkeys(os.path.realpath(path) for path in named))


def write_source(source: SourceFile, text: str, *, tree: Sequence[str] = ()) -> None:
    """Replace ``source.path`` with ``text`` atomically, keeping encoding and mode.

    Raises :class:`FileError` (and leaves the file alone) when the file changed on disk
    since :func:`read_source`, when it cannot be written, when it is reached through a
    symbolic link whose target is outside ``tree`` (real paths, :func:`write_tree`;
    empty: no limit), or when it has other hard links.
    """
    data = encode_source(text, source.encoding)
    target = os.path.realpath(source.path)  # replace a symlink's target, not the link
    _check_inside(target, tree)
    _check_unchanged(source, target)
    _check_writable(source, target)
    _check_one_name(target)
    directory = os.path.dirname(target) or "."
    with _interrupts_deferred():
        _replace_atomically(target, directory, data, source.mode)
    _fsync_directory(directory)


def _replace_atomically(target: str, directory: str, data: bytes, mode: int) -> None:
    try:
        handle, temporary = tempfile.mkstemp(
            dir=directory, prefix=f".{os.path.basename(target)}.", suffix=".gradfix-tmp"
        )
    except OSError as error:
        raise FileError(f"cannot write: {error.strerror or error}") from None
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except OSError as error:
        _remove_quietly(temporary)
        raise FileError(f"cannot write: {error.strerror or error}") from None
    except BaseException:  # an exception from outside (a signal handler that raises)
        _remove_quietly(temporary)
        raise


@contextlib.contextmanager
def _interrupts_deferred() -> Iterator[None]:
    """Hold Ctrl-C until the write is whole: a ``KeyboardInterrupt`` raised between
    ``mkstemp`` and the ``try`` that cleans up (or inside ``mkstemp`` after it created the
    file) would leave the temporary file behind. The handler can only be swapped on the
    main thread; elsewhere Python raises no ``KeyboardInterrupt`` anyway."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, _frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.SIG_DFL if previous is None else previous)
        if received and callable(previous):
            previous(signal.SIGINT, None)
        elif received and previous == signal.SIG_DFL:
            raise KeyboardInterrupt


def check_write_target(path: str, tree: Sequence[str]) -> None:
    """Raise :class:`FileError` when :func:`write_source` would refuse ``path`` for where
    it leads (a link out of ``tree``, other hard links): asked before running a file's
    code to prove its fixes, which would be wasted on a file that is not written."""
    target = os.path.realpath(path)
    _check_inside(target, tree)
    _check_one_name(target)


def _check_inside(target: str, tree: Sequence[str]) -> None:
    """A link out of the tree being fixed is left alone: fixing ``src/`` must not change a
    file elsewhere that a link in ``src/`` points to."""
    if tree and not any(_encloses(root, target) for root in tree):
        raise FileError(
            f"not written: a symbolic link to {target}, outside the tree being fixed "
            "(fix that file where it is)"
        )


def _check_one_name(target: str) -> None:
    """Replacing a file by a rename gives it a new inode: its other hard links would keep
    the old text, so a file with other names is refused (writing it in place instead
    could leave it torn by an interruption)."""
    try:
        links = os.stat(target).st_nlink
    except OSError as error:
        raise FileError(f"not written: {_os_error_message(error)}") from None
    if links > 1:
        others = f"{links - 1} other hard link{'s' if links > 2 else ''}"
        raise FileError(
            f"not written: the file has {others}, which replacing it would leave on the "
            "old text (fix it by hand, or make it a file of its own: cp, then mv over it)"
        )


def _check_unchanged(source: SourceFile, target: str) -> None:
    try:
        with open(target, "rb") as handle:
            current = handle.read()
    except OSError as error:
        raise FileError(f"not written: {_os_error_message(error)}") from None
    if _digest(current) != source.digest:
        raise FileError("changed on disk while gradfix was running; not overwritten, run again")


def _check_writable(source: SourceFile, target: str) -> None:
    """A read-only file is the user's "do not touch": replacing it by a rename (which
    only needs the directory writable) would go around that, so it is refused. Without
    any write bit counts as read-only for root too."""
    if not source.mode & 0o222 or not os.access(target, os.W_OK):
        raise FileError("not written: the file is read-only (make it writable to fix it)")


def _remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _fsync_directory(directory: str) -> None:
    """Make the rename durable; not every platform can open a directory."""
    try:
        descriptor = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)
