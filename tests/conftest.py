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
