from __future__ import annotations

import os

import pytest

# The suite leaves no warm verifier behind (it would outlive pytest by 15 minutes): each
# test process forks runners from a server of its own; tests/verify/test_shared_server.py
# covers the shared one.
os.environ["GRADFIX_VERIFY_DAEMON"] = "0"


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: a worker per core and one more, as most tests wait on a subprocess
    (the verifier's runs, Ray, torch imports) rather than compute."""
    try:
        cores = len(os.sched_getaffinity(0))  # the cores this process may run on
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return cores + 1


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-fixtures",
        action="store_true",
        default=False,
        help="rewrite fixtures/*/*.after.py from the current fixer output (on purpose only)",
    )
    parser.addoption(
        "--run-slow",
        action="store_true",
        default=False,
        help="also run the tests marked slow (or set GRADFIX_SLOW=1)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``slow`` (minutes: the sweep of the whole corpus) run only on demand."""
    if config.getoption("--run-slow") or os.environ.get("GRADFIX_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow: run with --run-slow or GRADFIX_SLOW=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def update_fixtures(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-fixtures"))


@pytest.fixture(autouse=True)
def _no_result_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests define rules of their own and run in the repository: no .gradfix_cache
    unless a test asks for it (tests/test_cache.py)."""
    monkeypatch.setenv("GRADFIX_NO_CACHE", "1")
