from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-fixtures",
        action="store_true",
        default=False,
        help="rewrite fixtures/*/*.after.py from the current fixer output (on purpose only)",
    )


@pytest.fixture
def update_fixtures(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-fixtures"))


@pytest.fixture(autouse=True)
def _no_result_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests define rules of their own and run in the repository: no .gradfix_cache
    unless a test asks for it (tests/test_cache.py)."""
    monkeypatch.setenv("GRADFIX_NO_CACHE", "1")
