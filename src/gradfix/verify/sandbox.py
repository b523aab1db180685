"""The project as the script sees it: its files where it expects them, no write into it.

A script reads ``data/train.pt`` or ``configs/run.yaml`` relative to its own directory (or
``Path(__file__).parent``), so each runner's working directory is a *mirror* of the
project (:func:`mirror_project`, parent side, no torch): the project's directories made
anew, its files as symbolic links to the originals. Reads see the project; a new file
(a checkpoint, a log) lands in the mirror, which is deleted afterwards.

Writes into an existing file would go through its link into the project, so the runner
installs a write guard (:func:`guard_project_writes`, an audit hook plus a wrapper of
``torch.save``, whose zip writer opens files in C++): before a file is opened for writing,
a link in the mirror is replaced by a private copy; a path that still lands in the
project (an absolute path, a directory too large to mirror) is refused with
``PermissionError``, which the verdict reports like any error of the program.

    mirror_project("/home/me/proj", work_dir)     # parent, before the runner starts
    guard_project_writes("/home/me/proj")          # runner, before the script runs
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
from pathlib import Path
from typing import Any

#: Directories and files made in a mirror at most; deeper trees are linked whole (read only).
MIRROR_LIMIT = 2000
#: Never mirrored entry by entry: tool state and environments (still readable, linked whole).
LINKED_WHOLE = frozenset({
    ".git", ".hg", ".svn", ".venv", "venv", "env", "node_modules", "__pycache__",
    ".gradfix_cache", ".mypy_cache", ".ruff_cache", ".pytest_cache", ".tox",
})  # fmt: skip
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


def mirror_project(project: str | os.PathLike[str], work: Path) -> None:
    """Fill the empty directory ``work`` with the tree of ``project`` (links to files)."""
    budget = [MIRROR_LIMIT]
    _mirror_dir(Path(os.path.abspath(project)), work, budget)


def place_file(work: Path, relative: str, text: str) -> None:
    """Write ``text`` at ``relative`` in the mirror ``work``, instead of the project's file
    (the link, or a directory linked whole, is replaced; never written through)."""
    target = work
    for part in Path(relative).parts[:-1]:
        target = target / part
        if target.is_symlink():  # a directory linked whole: made real, one level down
            original = Path(os.readlink(target))
            target.unlink()
            target.mkdir()
            _mirror_dir(original, target, [MIRROR_LIMIT])
        target.mkdir(exist_ok=True)
    target = target / Path(relative).name
    if target.is_symlink():
        target.unlink()
    target.write_text(text, encoding="utf-8")


def _mirror_dir(source: Path, target: Path, budget: list[int]) -> None:
    try:
        entries = sorted(os.scandir(source), key=lambda e: e.name)
    except OSError:
        return  # unreadable: the script gets the same error as in the project
    for entry in entries:
        link = target / entry.name
        budget[0] -= 1
        mirrored = budget[0] > 0 and entry.name not in LINKED_WHOLE
        if mirrored and entry.is_dir(follow_symlinks=False):
            link.mkdir()
            _mirror_dir(Path(entry.path), link, budget)
            continue
        try:
            os.symlink(entry.path, link)
        except OSError:
            continue


def guard_project_writes(project: str) -> None:
    """Runner side: no write of the script reaches ``project`` (see the module doc)."""
    root = os.path.realpath(project)
    sys.addaudithook(functools.partial(_audit, root))
    _wrap_torch_save(root)


def _audit(root: str, event: str, args: tuple[Any, ...]) -> None:
    if event == "open":
        path, mode, flags = args
        if _is_path(path) and _writes(mode, flags):
            make_writable_here(path, root, keep=_keeps_content(mode, flags))
    elif event in ("os.remove", "os.rmdir", "os.truncate", "shutil.rmtree"):
        if _is_path(args[0]):
            _refuse_in_project(args[0], root, event)
    elif event in ("os.rename", "os.replace"):
        for path in args[:2]:
            if _is_path(path):
                _refuse_in_project(path, root, event)


def make_writable_here(path: Any, root: str, *, keep: bool = True) -> None:
    """Before writing ``path``: a link of the mirror becomes a private file (a copy of the
    project's when ``keep``); a path that still lands in the project is refused."""
    name = os.fspath(path)
    if isinstance(name, bytes):
        name = os.fsdecode(name)
    if os.path.islink(name) and _inside(os.path.realpath(name), root):
        original = os.path.realpath(name)
        os.unlink(name)
        if keep and os.path.isfile(original):
            shutil.copyfile(original, name)
    _refuse_in_project(name, root, "open")


def _refuse_in_project(path: Any, root: str, event: str) -> None:
    name = os.fsdecode(os.fspath(path))
    real = os.path.join(os.path.realpath(os.path.dirname(os.path.abspath(name))),
                        os.path.basename(name))  # fmt: skip
    if _inside(real, root):
        raise PermissionError(
            f"gradfix verify: {event} of {name!r} would change the project; "
            "verification writes nowhere in it"
        )


def _wrap_torch_save(root: str) -> None:
    import torch

    original = torch.save

    @functools.wraps(original)
    def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
        if _is_path(f):
            make_writable_here(f, root, keep=False)
        return original(obj, f, *args, **kwargs)

    torch.save = save


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _is_path(value: Any) -> bool:
    return isinstance(value, (str, bytes, os.PathLike))


def _writes(mode: Any, flags: Any) -> bool:
    if isinstance(mode, str):
        return any(c in mode for c in "wax+")
    return isinstance(flags, int) and bool(flags & _WRITE_FLAGS)


def _keeps_content(mode: Any, flags: Any) -> bool:
    """Appending or updating in place needs the old content; ``w`` truncates anyway."""
    if isinstance(mode, str):
        return "a" in mode or "+" in mode and "w" not in mode
    return isinstance(flags, int) and not flags & os.O_TRUNC
