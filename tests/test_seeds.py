"""The seed documents' correct examples must get no finding from any default rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from gradfix.codemods import ALL_RULES
from gradfix.engine import lint_source

SEEDS = sorted((Path(__file__).parent / "data" / "seeds_correct").glob("*.py"))
DEFAULT_RULES = [rule for rule in ALL_RULES if rule.default_enabled]


@pytest.mark.parametrize("path", SEEDS, ids=lambda p: p.stem)
def test_correct_seed_examples_are_clean(path: Path) -> None:
    result = lint_source(path.read_text(encoding="utf-8"), rules=DEFAULT_RULES, path=str(path))
    assert result.findings == []
