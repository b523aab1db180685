"""LibCST loaded on first use: most runs build no fix and never need it.

``import libcst as cst`` sits at the top of the modules that build fixes; importing LibCST
costs about 0.2 s (hundreds of node dataclasses), a third of a warm ``gradfix check``.
:func:`defer_libcst` (called first thing by the command line) puts a stand-in module in
its place: the real import runs at the first read of a name the stand-in lacks
(``cst.Name``, ``cst.parse_module``) or of a submodule (``libcst.metadata``), which only
the building of a fix, the fixed text or LibCST's own parse does; the stand-in then holds
the real module's names, so later reads cost nothing extra.
(``importlib.util.LazyLoader`` cannot do this: every later ``import libcst`` reads the
module's ``__spec__``, which loads it.)

So modules must not read LibCST names at import time: tables of LibCST types are built by
a function on first use (``functools.cache``), transformer classes are defined by a
function decorated with :func:`lazy_class`, and type aliases are strings.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import sys
import types
from collections.abc import Callable
from typing import Any


class _Deferred(types.ModuleType):
    def __getattr__(self, name: str) -> object:
        return getattr(_load(self), name)


def _load(stand_in: types.ModuleType) -> types.ModuleType:
    if sys.modules.get("libcst") is stand_in:
        del sys.modules["libcst"]
    real = importlib.import_module("libcst")
    stand_in.__dict__.update(real.__dict__)  # the stand-in's next reads find them directly
    return real


def defer_libcst() -> None:
    """Make ``import libcst`` cheap until LibCST is used (no-op once it is imported)."""
    if "libcst" in sys.modules:
        return
    spec = importlib.util.find_spec("libcst")
    if spec is None:
        return  # the import fails where it is made, as it would without this
    stand_in = _Deferred("libcst")
    stand_in.__spec__ = spec  # read by every ``import libcst``: must not load it
    sys.modules["libcst"] = stand_in


def lazy_class(define: Callable[[], type]) -> Callable[..., Any]:
    """``define()`` returns a class that subclasses a LibCST class; the decorated name
    builds it on first call and instantiates it (``_Replacer(nodes)`` as before)."""
    defined = functools.cache(define)

    @functools.wraps(define)
    def instantiate(*args: Any, **kwargs: Any) -> Any:
        return defined()(*args, **kwargs)

    return instantiate
