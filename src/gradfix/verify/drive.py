"""What an unverified verdict tells the user to do next, from the project itself.

The oracle ends a verdict it could not reach with a hint to drive the program
(``--cmd`` / ``--entry``). This module puts in its place the project's real ways to run
the file's code: a script with ``if __name__ == "__main__":`` that imports it (or the
file itself), a test file that imports it, a ``[project.scripts]`` console script of
``pyproject.toml``; only when there is none does it say ``--cmd COMMAND``. A verdict on a
run that made no backward call also says where that run ended (``sys.exit(0)`` at line
9), from the trace's outcome.

    reason = explain_unverified(reason, evidence, "src/model.py", root=".")
"""

from __future__ import annotations

import ast
import functools
import os
import re
import shlex
import sys
from pathlib import Path
from typing import Any

from gradfix import pyast
from gradfix.verify.command import IGNORED

#: the oracle's hints (:mod:`gradfix.verify.oracle`): the canned command they suggest
_CANNED = re.compile(
    r"; to verify it, (?P<sooner>stop it sooner \(--max-steps 5\) or )?drive (?:the program "
    r"yourself|it yourself): --cmd \"python train\.py --epochs 1\" or --entry MODULE:FUNCTION"
)
#: verdicts on a run without a backward call (then where the run ended matters)
_NO_BACKWARD = "neither version calls backward"
#: files read to find the entry points, at most (a large tree is not walked further)
MAX_FILES = 2000
#: suggestions shown, at most
SHOWN = 3


def explain_unverified(reason: str, evidence: dict[str, Any], path: str, root: str = ".") -> str:
    """``reason`` with the oracle's canned hint replaced by the project's entry points for
    ``path`` and, for a run without backward calls that ended early, where it ended."""
    match = _CANNED.search(reason)
    if match is None:
        return reason
    head = reason[: match.start()]
    if _NO_BACKWARD in head:
        head += _where_it_ended(evidence.get("before_outcome"), path)
    sooner = "stop it sooner (--max-steps 5) or " if match.group("sooner") else ""
    hint = f"; to verify it, {sooner}drive it with {drivers_text(path, root)}"
    return head + hint + reason[match.end() :]


def _where_it_ended(outcome: Any, path: str) -> str:
    """`` (the run ended at `sys.exit(0)`, line 9)`` for a run that exited early (a line
    of another file: ``scripts/run.py:9``)."""
    if not isinstance(outcome, dict) or not isinstance(outcome.get("exit"), dict):
        return ""
    exit_ = outcome["exit"]
    code = exit_.get("code")
    place = f"`{code}`" if code else "an exit"
    where = f"line {exit_['line']}" if exit_.get("line") else None
    file, _, line = str(exit_.get("where") or "").rpartition(":")
    if file and line.isdigit():  # the program's own frame: the user's file, not a driver
        same = os.path.basename(file) == os.path.basename(path)
        where = f"line {line}" if same else f"{Path(file).as_posix()}:{line}"
    return f" (the run ended at {place}{f', {where}' if where else ''})"


def drivers_text(path: str, root: str = ".") -> str:
    """``--cmd "python train.py" or --cmd "pytest tests/test_model.py"``: how to run the
    code of ``path`` in the project at ``root``; ``--cmd COMMAND`` when nothing does."""
    found = drivers(os.path.abspath(path), os.path.abspath(root))
    if not found:
        return "--cmd COMMAND (a command that runs this code) or --entry MODULE:FUNCTION"
    return " or ".join(found[:SHOWN])


@functools.lru_cache(maxsize=64)
def drivers(path: str, root: str) -> tuple[str, ...]:
    """The ``--cmd`` / ``--entry`` options that run ``path`` (absolute), best first:
    scripts that import it (or itself, run with its arguments), test files that import
    it, then the console scripts of the project."""
    names = _module_names(path, root)
    scripts, tests = [], []
    for file, text in _project_texts(root):
        relative = _relative(file, root)
        itself = os.path.abspath(file) == path
        if not itself and not _imports(text, names):
            continue
        if _is_test(file):
            tests.append(f'--cmd "pytest {shlex.quote(relative)}"')
        elif _runs_as_program_text(text):
            arguments = " ARGS" if itself else ""  # as run already, it did not get there
            scripts.append(f'--cmd "python {shlex.quote(relative)}{arguments}"')
    scripts.sort(key=lambda hint: hint.endswith(' ARGS"'))  # other scripts first
    return (*scripts, *tests, *_console_scripts(root, names))


def runs_as_program(module: ast.Module) -> bool:
    """Whether a module is a program one runs: a ``__main__`` block, or a flat script (a
    loop, or a call made for what it does such as ``main()`` or ``loss.backward()``, at
    its top level), not only definitions and imports."""
    for node in module.body:
        if isinstance(node, (ast.For, ast.While)):
            return True
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            return True
        test = node.test if isinstance(node, ast.If) else None
        if isinstance(test, ast.Compare) and isinstance(test.left, ast.Name):
            if test.left.id == "__name__":
                return True
    return False


def _runs_as_program_text(text: str) -> bool:
    try:
        return runs_as_program(pyast.parse(text))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False


def _module_names(path: str, root: str) -> frozenset[str]:
    """The dotted names ``path`` is imported by: from ``root`` and from a ``src/``
    layout, and its own name (a script's directory is on ``sys.path``)."""
    relative = Path(os.path.relpath(path, root)).with_suffix("")
    parts = [part for part in relative.parts if part != ".."]
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    names = {".".join(parts[i:]) for i in range(len(parts))} - {""}
    return frozenset(names)


def _imports(text: str, names: frozenset[str]) -> bool:
    """Whether the module ``text`` imports one of ``names`` (or a name from it)."""
    if not any(name.rsplit(".", 1)[-1] in text for name in names):
        return False
    try:
        tree = pyast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    for node in ast.walk(tree):
        if type(node) is ast.Import:
            if any(alias.name in names for alias in node.names):
                return True
        elif type(node) is ast.ImportFrom and node.module:
            if node.module in names or any(
                f"{node.module}.{alias.name}" in names for alias in node.names
            ):
                return True
    return False


@functools.lru_cache(maxsize=4)
def _project_texts(root: str) -> tuple[tuple[Path, str], ...]:
    """Each Python file of the project and its text (read once per verification run:
    every unverified fix of the project asks)."""
    texts = []
    for file in _python_files(root):
        try:
            texts.append((file, file.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError):
            continue
    return tuple(texts)


def _python_files(root: str) -> list[Path]:
    """The ``.py`` files under ``root``, hidden and tool directories left out, sorted."""
    found: list[Path] = []
    ignored = {pattern for pattern in IGNORED if "*" not in pattern}
    for directory, subdirectories, files in os.walk(root):
        subdirectories[:] = sorted(
            d for d in subdirectories if d not in ignored and not d.startswith(".")
        )
        for name in sorted(files):
            if name.endswith(".py"):
                found.append(Path(directory, name))
                if len(found) >= MAX_FILES:
                    return found
    return found


def _is_test(file: Path) -> bool:
    return file.name.startswith("test_") or file.name.endswith("_test.py")


def _relative(file: Path, root: str) -> str:
    return Path(os.path.relpath(file, root)).as_posix()


def _console_scripts(root: str, names: frozenset[str]) -> list[str]:
    """``--entry MODULE:FUNCTION`` of each ``[project.scripts]`` entry of the project's
    ``pyproject.toml``: the one in ``path``'s own module first."""
    try:
        text = Path(root, "pyproject.toml").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.9 and 3.10
        import tomli as tomllib
    try:
        scripts = tomllib.loads(text).get("project", {}).get("scripts", {})
    except (tomllib.TOMLDecodeError, AttributeError):
        return []
    if not isinstance(scripts, dict):
        return []
    targets = [
        value.split("[", 1)[0].strip()
        for value in scripts.values()
        if isinstance(value, str) and ":" in value
    ]
    # the project's own modules only (a script of a dependency is not this code's driver)
    targets = [target for target in targets if _in_project(target.split(":", 1)[0], root)]
    targets.sort(key=lambda target: target.split(":", 1)[0] not in names)
    return [f"--entry {target}" for target in targets]


def _in_project(module: str, root: str) -> bool:
    """Whether the dotted ``module`` is a file of the project (flat or ``src/`` layout)."""
    relative = Path(*module.split("."))
    return any(
        Path(root, base, relative).with_suffix(".py").is_file()
        or Path(root, base, relative, "__init__.py").is_file()
        for base in ("", "src")
    )
