"""Typer's option values coerced without Pydantic (``gradfix.cli.coercion``): every option
of every command gives the value, or the error message, that typer's own adapter gives,
and a check whose options are plain never imports Pydantic."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

typer_core = pytest.importorskip("typer.core")
if not hasattr(typer_core, "build_runtime_param"):
    pytest.skip("a typer without Pydantic adapters", allow_module_level=True)

VALUES: list[Any] = [
    "x.py", "", "2", "0", "007", "-1", "1.5", " 3", "abc", 2, 0, -3, True,
    "concise", "json", "CONCISE", "bogus", "text",
    ["a.py", "b.py"], ("a.py",), [], ["a.py", 3], "ALL",
]  # fmt: skip


def _options() -> list[tuple[Any, Any, Any]]:
    """(click command, parameter, its type descriptor) for every option of every command."""
    import typer.main

    from gradfix.cli import app

    group = typer.main.get_command(app)
    found = []
    for command in group.commands.values():  # type: ignore[attr-defined]
        for param in command.params:
            descriptor = getattr(param, "type_descriptor", None)
            if descriptor is not None and descriptor.file_annotation is None:
                found.append((command, param, descriptor))
    return found


def _outcome(coerce: Any, value: Any, param: Any, ctx: Any) -> tuple[str, Any]:
    from typer._click.exceptions import BadParameter

    try:
        result = coerce(value, param=param, ctx=ctx)
    except BadParameter as error:
        return "error", error.format_message()
    return type(result).__name__, result


def test_every_option_coerces_as_typers_adapter() -> None:
    from typer import _coercion
    from typer._click import Context

    import gradfix.cli  # noqa: F401  (installs the deferred coercion)

    options = _options()
    assert len(options) > 20  # every command's options, not an empty loop
    plain = 0
    for command, param, descriptor in options:
        ctx = Context(command)
        ours = typer_core.build_runtime_param(descriptor)
        theirs = _coercion.build_runtime_param(descriptor)
        assert type(ours) is not type(theirs)  # the deferred one is installed
        for value in VALUES:
            expected = _outcome(theirs.coerce, value, param, ctx)
            assert _outcome(ours.coerce, value, param, ctx) == expected, (param.name, value)
            plain += "_full" not in ours.__dict__
    assert plain > 0


RUN = textwrap.dedent(
    """
    import sys
    from gradfix.cli import main
    sys.argv = ["gradfix", *sys.argv[1:]]
    try:
        main()
    except SystemExit as exit_:
        code = exit_.code
    print("pydantic loaded:", "pydantic" in sys.modules, file=sys.stderr)
    sys.exit(code)
    """
)


@pytest.mark.parametrize(
    ("args", "loaded"),
    [
        (["check", "-j", "2", "--format", "concise", "--select", "GF201", "a.py"], False),
        (["check", "-j", "x", "a.py"], True),  # an error: typer's adapter words it
    ],
)
def test_pydantic_is_imported_only_for_values_that_are_not_plain(
    tmp_path: Path, args: list[str], loaded: bool
) -> None:
    (tmp_path / "a.py").write_text("import torch\n", encoding="utf-8")
    run = subprocess.run(
        [sys.executable, "-c", RUN, *args, "--no-cache"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert f"pydantic loaded: {loaded}" in run.stderr, run.stderr
