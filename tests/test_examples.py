"""The bundled examples: the README's main command previews one rewrite per example,
and every rewrite is proven by execution."""

from __future__ import annotations

from pathlib import Path

import pytest

from gradfix.codemods import ALL_RULES
from gradfix.engine import lint_source

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.py"))


def test_examples_cover_the_four_core_pitfalls() -> None:
    codes = set()
    for path in EXAMPLES:
        result = lint_source(path.read_text(encoding="utf-8"), rules=ALL_RULES, path=str(path))
        codes.update(f.code for f in result.findings)
    assert {"GF101", "GF201", "GF202", "GF301"} <= codes


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_fix_is_verified(path: Path, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from gradfix.verify import verify_files

    source = path.read_text(encoding="utf-8")
    fixed = lint_source(source, rules=ALL_RULES, fix=True, unsafe_fixes=True)
    assert fixed.changed and fixed.remaining == []
    after = tmp_path / path.name
    after.write_text(fixed.source, encoding="utf-8")
    verdict = verify_files(path, after)
    assert verdict.status == "verified", verdict.reason
