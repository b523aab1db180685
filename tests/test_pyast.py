"""gradfix's parses go through one lock and survive CPython 3.11's shared AST counter."""

from __future__ import annotations

import ast

import pytest

from gradfix import pyast


def test_a_recursion_depth_mismatch_another_thread_caused_is_parsed_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real, calls = ast.parse, []

    def clobbered(*args: object, **kwargs: object) -> ast.AST:
        calls.append(args)
        if len(calls) == 1:
            raise SystemError("AST constructor recursion depth mismatch (before=39, after=33)")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ast, "parse", clobbered)
    tree = pyast.parse("x = 1\n")
    assert isinstance(tree, ast.Module) and len(calls) == 2
    monkeypatch.setattr(ast, "parse", lambda *a, **k: (_ for _ in ()).throw(SystemError("other")))
    with pytest.raises(SystemError, match="other"):
        pyast.parse("x = 1\n")
