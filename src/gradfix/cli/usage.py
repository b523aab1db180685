"""A command line error (an unknown option, a bad value) on one plain line.

Typer shows a usage error as the usage, a hint and ``Error: Invalid value for '--format':
Value error, 'xml' is not one of 'text', ...`` (Pydantic's words). :func:`install` makes
it one line, like gradfix's other errors, with the exit status 2:

    error: unknown format 'xml' (choose from: text, concise, json, sarif, github)
    error: invalid value for --jobs: input should be a valid integer (see gradfix check -h)

The help shown when a command is given no arguments (``no_args_is_help``) is left as it is.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import IO, Any

_UNKNOWN_CHOICE = re.compile(r"'(?P<value>[^']*)' is not one of")
#: Pydantic's prefix of a validator's message
_PREFIX = re.compile(r"^(Value error|Assertion failed), ")


def install() -> None:
    """Replace the usage error's ``show`` (once); nothing with a typer that has none."""
    try:
        from typer._click import exceptions
    except ImportError:
        return
    usage_error = getattr(exceptions, "UsageError", None)
    if usage_error is None or getattr(usage_error.show, "one_line", False):
        return

    def show(self: Any, file: IO[Any] | None = None) -> None:
        import typer

        typer.echo(f"error: {plain_message(self)}", file=file, err=True)

    show.one_line = True  # type: ignore[attr-defined]
    usage_error.show = show


def plain_message(error: Any) -> str:
    """The error in one sentence: the choices of an option whose value is not one of
    them, the option and the reason for another bad value, otherwise typer's message and
    where the help is."""
    param = getattr(error, "param", None)
    message = _PREFIX.sub("", str(getattr(error, "message", "") or "")).strip()
    option = _option_name(param)
    choices = _choices(param)
    unknown = _UNKNOWN_CHOICE.search(message)
    if choices and unknown and option:
        name = option.lstrip("-")
        listed = ", ".join(choices)
        return f"unknown {name} '{unknown.group('value')}' (choose from: {listed})"
    if option and message:
        return f"invalid value for {option}: {_sentence(message)}{_help_hint(error)}"
    unknown_option = getattr(error, "option_name", None)
    if unknown_option:
        possible = sorted(getattr(error, "possibilities", None) or [])
        guess = f"; did you mean {' or '.join(possible)}?" if 0 < len(possible) <= 3 else ""
        return f"no such option: {unknown_option}{guess}{_help_hint(error)}"
    text = error.format_message() if hasattr(error, "format_message") else message
    return f"{_sentence(text)}{_help_hint(error)}"


def _option_name(param: Any) -> str | None:
    """``--format`` (the first long name), or the argument's metavar."""
    if param is None:
        return None
    names = list(getattr(param, "opts", None) or [])
    long = [name for name in names if name.startswith("--")]
    if long or names:
        return (long or names)[0]
    name = getattr(param, "name", None)
    return name.upper() if isinstance(name, str) else None


def _choices(param: Any) -> list[str]:
    descriptor = getattr(param, "type_descriptor", None)
    annotation = getattr(descriptor, "annotation", None)
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return [str(member.value) for member in annotation]
    return []


def _sentence(text: str) -> str:
    """One line, lower-case first letter (it follows ``error:``), no final period."""
    line = " ".join(text.split()).rstrip(".")
    return line[:1].lower() + line[1:] if line[1:2].islower() else line


def _help_hint(error: Any) -> str:
    ctx = getattr(error, "ctx", None)
    path = getattr(ctx, "command_path", None)
    return f" (see {path} -h)" if path else ""
