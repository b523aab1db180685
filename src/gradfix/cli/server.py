"""The ``lsp`` command: the language server on stdin/stdout."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    pass


def lsp() -> None:
    """Run the language server on stdin/stdout (for editors: diagnostics, quick fixes,
    fix all, suppress comments, rule docs on hover).

    Settings (initializationOptions or the `gradfix` configuration section): `select`,
    `ignore` (lists of codes) and `verify` (prove each quick fix by execution; needs torch).
    """
    from gradfix.lsp import serve

    raise typer.Exit(serve())
