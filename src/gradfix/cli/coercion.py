"""Typer's coercion of option values, without Pydantic for the plain values.

Recent typer versions check every option value with a Pydantic ``TypeAdapter``, built when
the option is first processed, given or not: the first one imports Pydantic (0.1 s, a
quarter of a warm ``gradfix check``). Most values are plain: an option not given
(``None``), a string, a list of strings, an integer in range, a member of an ``Enum``.
:func:`install` makes typer build each option's coercion on first use: typer skips it for
``None``; a plain value is coerced here as the adapter would (the same value, the same
type); any other value (one the adapter rejects, with its own message; a type not listed
here) goes to typer's adapter, built then. Nothing changes with a typer that has no
such adapters (its private names absent).
"""

from __future__ import annotations

import dataclasses
import re
from enum import Enum
from typing import Any, get_args, get_origin

_NOT_PLAIN = object()
_DECIMAL = re.compile(r"0|[1-9][0-9]*")  # what every int parser reads alike


def install() -> None:
    """Route typer's ``build_runtime_param`` through :func:`plain_value` (once)."""
    try:
        from typer import _coercion, core
    except ImportError:
        return
    build = getattr(core, "build_runtime_param", None)
    base = getattr(_coercion, "RuntimeParam", None)
    if build is None or base is None or getattr(build, "deferred", False):
        return
    deferred_class = _deferred_class(base, build)

    def build_deferred(descriptor: Any) -> Any:
        if getattr(descriptor, "file_annotation", None) is not None:
            return build(descriptor)  # files are opened by typer itself
        return deferred_class(
            annotation=descriptor.annotation,
            parameter_info=descriptor.parameter_info,
            descriptor=descriptor,
        )

    build_deferred.deferred = True  # type: ignore[attr-defined]
    core.build_runtime_param = build_deferred


def _deferred_class(base: type, build: Any) -> type:
    @dataclasses.dataclass(frozen=True)
    class Deferred(base):  # type: ignore[valid-type, misc]
        """An option's coercion: plain values here, the others by typer's adapter."""

        descriptor: Any = None

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            coerced = plain_value(self.annotation, self.parameter_info, value, ctx)
            if coerced is not _NOT_PLAIN:
                return coerced
            return self.full()._coerce_value(value, param=param, ctx=ctx)

        def full(self) -> Any:
            """Typer's own coercion of this option (with its adapter), built once."""
            real = self.__dict__.get("_full")
            if real is None:
                real = build(self.descriptor)
                object.__setattr__(self, "_full", real)
            return real

    return Deferred


def plain_value(annotation: Any, info: Any, value: Any, ctx: Any) -> Any:
    """``value`` coerced to ``annotation`` as typer's adapter would, or ``_NOT_PLAIN``."""
    if getattr(info, "parser", None) is not None:
        return _NOT_PLAIN
    if annotation is str:
        return value if type(value) is str else _NOT_PLAIN
    if get_origin(annotation) is list and get_args(annotation) == (str,):
        if type(value) in (list, tuple) and all(type(item) is str for item in value):
            return list(value)
        return _NOT_PLAIN
    if annotation is int:
        return _plain_int(info, value)
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return _plain_choice(annotation, info, value, ctx)
    return _NOT_PLAIN


def _plain_int(info: Any, value: Any) -> Any:
    if type(value) is str and _DECIMAL.fullmatch(value):
        number = int(value)
    elif type(value) is int:
        number = value
    else:
        return _NOT_PLAIN
    low, high = getattr(info, "min", None), getattr(info, "max", None)
    if (low is not None and number < low) or (high is not None and number > high):
        return _NOT_PLAIN  # refused or clamped: the adapter says which, in its words
    return number


def _plain_choice(annotation: type[Enum], info: Any, value: Any, ctx: Any) -> Any:
    from typer._param_types import coerce_cli_choice

    try:
        return coerce_cli_choice(
            value, choices=list(annotation), case_sensitive=info.case_sensitive, ctx=ctx
        )
    except ValueError:
        return _NOT_PLAIN  # the adapter's error message
