"""What the other files of a run say about a file: functions called only under ``no_grad``.

Real projects define a model in ``model.py`` and call it from ``train.py`` and
``sample.py``. A finding in ``Model.generate`` (an in-place op on a tensor autograd
saved) is a bug only if ``generate`` runs with grad on; when ``model.py`` itself never
calls it, only its callers in the other files can tell (``@torch.no_grad() def test():
... model.generate(x)``).

The analysis marks the functions whose grad mode it was asked for and no call site of
their own file decides (:attr:`~gradfix.semantic.navigation.Navigation.open_functions`);
a finding inside one names it (``FileResult.open_callers``, cached with the findings).
After a run, :func:`no_grad_callers` looks for the call sites of those names in every
file of the same project in the run (:func:`project_of`; a text search first, only the
files that may call a name under ``no_grad`` are parsed),
and the files with such findings are linted again knowing which of them run under
``no_grad`` at every call site (``RunOptions.no_grad_callers``): the rules decide again,
as they do for a function whose callers are in its own file.

Calls are matched by name, as the analysis matches them in one file (``obj.generate(x)``
is a call of every ``generate``). Conservative where it cannot see: a call site in a
notebook or in a file that does not parse counts as one with grad on, and a function
with no call site in the run keeps its findings.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Collection, Iterable, Sequence

from gradfix import pyast
from gradfix.fileio.files import FileError, is_notebook, read_source

#: files that mark the root of a project
PROJECT_MARKERS = (".git", "pyproject.toml", "setup.py", "setup.cfg")


def project_of(path: str, arguments: Sequence[str]) -> str:
    """The project ``path`` belongs to: the nearest directory above it with a
    :data:`PROJECT_MARKERS` file, else the argument of the run that holds it (a file
    argument: its directory). Call sites count within one project: ``gradfix check a b``
    of two unrelated repositories does not mix their functions."""
    return _project_of_directory(os.path.dirname(os.path.abspath(path)), tuple(arguments))


@functools.lru_cache(maxsize=4096)  # asked for every file of a run: once per directory
def _project_of_directory(directory: str, arguments: tuple[str, ...]) -> str:
    marked = _marked_root(directory)
    if marked is not None:
        return marked
    for argument in arguments:
        root = os.path.abspath(argument)
        root = root if os.path.isdir(root) else os.path.dirname(root)
        if directory == root or directory.startswith(root + os.sep):
            return root
    return directory


@functools.lru_cache(maxsize=4096)
def _marked_root(directory: str) -> str | None:
    if any(os.path.exists(os.path.join(directory, marker)) for marker in PROJECT_MARKERS):
        return directory
    parent = os.path.dirname(directory)
    return None if parent == directory else _marked_root(parent)


def no_grad_callers(names: Collection[str], defined_in: str, paths: Iterable[str]) -> set[str]:
    """Those of ``names`` (functions of the file ``defined_in``) that ``paths`` call at
    least once, always under ``no_grad``; only the files that may import ``defined_in``
    count (:func:`_may_import`).

    Text first: a file that calls a name and never turns grad off (no ``no_grad``,
    ``inference_mode`` or ``set_grad_enabled`` in it) calls it with grad on, and so does
    a notebook; only the files that may call a remaining name under ``no_grad`` are
    parsed, once every file has been searched."""
    alive = set(names)
    importer = _may_import(defined_in)
    to_parse: list[tuple[str, set[str]]] = []
    for path in paths:
        text = _text(path) if alive and path != defined_in else None
        if text is None or not importer(path, text):
            continue
        called = _called(text, {name for name in alive if name in text})
        if not called:
            continue
        if is_notebook(path) or not any(word in text for word in _GRAD_OFF):
            alive -= called  # a call with grad on
        else:
            to_parse.append((path, called))
    sites = dict.fromkeys(alive, 0)
    for path, called in to_parse:
        text = _text(path) if alive & called else None
        if text is None:
            continue
        for name, (count, with_grad) in _sites(text, called & alive).items():
            sites[name] += count
            if with_grad:
                alive.discard(name)
    return {name for name in alive if sites[name]}


def _may_import(defined_in: str) -> Callable[[str, str], bool]:
    """Whether a file (path, text) may import the module ``defined_in``. A module of a
    package (its directory has ``__init__.py``) may be imported from anywhere in the
    project; a script module next to others (``model.py`` beside ``main.py``, a
    directory per chapter or example) only from its own directory, and from the files
    whose imports name it (``from models.net import Net``; a bare ``import net`` unless
    the file has a ``net.py`` of its own beside it)."""
    target = os.path.abspath(defined_in)
    directory = os.path.dirname(target)
    if os.path.exists(os.path.join(directory, "__init__.py")):
        return lambda path, text: True
    stem = os.path.splitext(os.path.basename(target))[0]
    imports = re.compile(rf"(?m)^[ \t]*(?:from|import)[ \t]+([\w.]*\b{re.escape(stem)})\b")

    def may_import(path: str, text: str) -> bool:
        here = os.path.dirname(os.path.abspath(path))
        if here == directory:
            return True
        for match in imports.finditer(text):
            relative = match.group(1).lstrip(".").replace(".", os.sep) + ".py"
            if not target.endswith(os.sep + relative):
                continue
            sibling = os.path.join(here, relative)  # beside the file: what Python finds first
            if not os.path.exists(sibling) or os.path.samefile(sibling, target):
                return True
        return False

    return may_import


#: words without which a file cannot turn grad off
_GRAD_OFF = ("no_grad", "inference_mode", "set_grad_enabled")


def _text(path: str) -> str | None:
    try:
        return read_source(path).text
    except FileError:
        return None


def _called(text: str, names: set[str]) -> set[str]:
    """Those of ``names`` that ``text`` calls: ``name(`` or ``.name(``, not ``def name(``."""
    if not names:
        return set()
    alternatives = "|".join(sorted(map(re.escape, names)))
    pattern = re.compile(rf"(?<!def )(?<![\w])({alternatives})\s*\(")
    return {match.group(1) for match in pattern.finditer(text)}


def _sites(text: str, called: set[str]) -> dict[str, tuple[int, int]]:
    """For each name of ``called``: its call sites in ``text`` and how many of them run
    with grad on (a text that does not parse: one, which cannot be told)."""
    from gradfix.semantic import Semantic

    try:
        tree = pyast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return {name: (1, 1) for name in called}
    semantic = Semantic(tree, text)
    found = {}
    for name in called:
        calls = semantic.calls_named(name)
        found[name] = (len(calls), sum(not semantic.in_no_grad(call) for call in calls))
    return found
