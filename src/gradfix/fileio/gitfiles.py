"""What git knows about the files of a run: ``.gitignore`` and ``--changed-since REF``.

Both ask git itself (``git check-ignore``, ``git diff --name-only``), so nested ignore
files, global excludes and negations behave exactly as in the user's repository. Outside a
git repository nothing is ignored, and ``--changed-since`` is an error.

    ignored = ignored_paths(["src/a.py", "build/b.py"])      # {"build/b.py"}
    changed = changed_since("origin/main")                   # absolute paths
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence


class GitError(RuntimeError):
    """A git question that cannot be answered; ``str()`` is a one-line message."""


def _git(
    args: Sequence[str], cwd: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            ["git", *args], cwd=cwd, input=stdin, capture_output=True, text=True, check=False
        )
    except OSError as error:
        raise GitError(f"cannot run git: {error.strerror}") from None


def repository_root(directory: str) -> str | None:
    result = _git(["rev-parse", "--show-toplevel"], directory)
    return result.stdout.strip() if result.returncode == 0 else None


def ignored_paths(paths: Sequence[str]) -> set[str]:
    """The subset of ``paths`` that git ignores (paths as given)."""
    by_root: dict[str, list[str]] = {}
    for path in paths:
        directory = os.path.dirname(os.path.abspath(path))
        root = _cached_root(directory)
        if root is not None:
            by_root.setdefault(root, []).append(path)
    ignored: set[str] = set()
    for root, group in by_root.items():
        absolute = {os.path.abspath(p): p for p in group}
        # --no-index: a tracked file that matches a pattern still counts as ignored here,
        # as in ruff's discovery; --stdin -z: any file name
        result = _git(["check-ignore", "--no-index", "--stdin", "-z"], root, "\0".join(absolute))
        if result.returncode not in (0, 1):
            continue  # git could not tell: ignore nothing rather than lose files
        for name in filter(None, result.stdout.split("\0")):
            original = absolute.get(os.path.abspath(os.path.join(root, name)))
            if original is not None:
                ignored.add(original)
    return ignored


_ROOTS: dict[str, str | None] = {}


def _cached_root(directory: str) -> str | None:
    """The repository of ``directory``: asked of git once per repository, then inherited
    by subdirectories that hold no ``.git`` of their own (no git process per folder)."""
    if directory not in _ROOTS:
        parent = os.path.dirname(directory)
        marked = os.path.exists(os.path.join(directory, ".git"))
        if not marked and parent != directory and os.path.isdir(parent):
            _ROOTS[directory] = _cached_root(parent)
        elif not marked and "GIT_DIR" not in os.environ:
            _ROOTS[directory] = None  # no ``.git`` up to the filesystem's root: no git asked
        else:
            _ROOTS[directory] = repository_root(directory) if os.path.isdir(directory) else None
    return _ROOTS[directory]


def changed_since(ref: str, cwd: str = ".") -> set[str]:
    """Absolute paths of files changed since ``ref`` (committed, staged, unstaged) and
    untracked files that are not ignored."""
    root = repository_root(cwd)
    if root is None:
        raise GitError("--changed-since needs a git repository")
    diff = _git(["diff", "--name-only", "-z", ref], root)
    if diff.returncode != 0:
        message = (diff.stderr.strip().splitlines() or ["unknown revision"])[0]
        raise GitError(f"--changed-since {ref}: {message}")
    untracked = _git(["ls-files", "--others", "--exclude-standard", "-z"], root)
    names = [*diff.stdout.split("\0"), *untracked.stdout.split("\0")]
    return {os.path.join(root, name) for name in names if name}
