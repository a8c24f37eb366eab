"""Shared pytest set-up: hypothesis profiles, the `integration` marker and `--require-integrations`.

Hypothesis profiles: `dev` (default, quick), `ci` (chosen when the CI environment variable is set:
derandomized and bounded, so a property campaign costs the same on every run), `thorough` (a
campaign). Choose one with SEQBALANCE_HYPOTHESIS_PROFILE=thorough pytest ...

Tests that need torch, Ray, verl, TransferQueue or transformers carry the `integration` marker.
Without those packages they skip, naming what to install. `--require-integrations` (what the CI
integration job passes, see `make test-integrations`) turns such a skip into a failure, so a
missing or broken dependency cannot pass silently:

- an `integration` test that skips (at set-up or in its body) fails with the skip's reason;
- a test module skipped while it is collected (a module-level `pytest.importorskip`) fails too:
  its markers cannot be read when it cannot be imported, so under this option every collection
  skip counts. Plain test modules never skip at collection.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "dev", max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "ci",
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
    print_blob=True,
)
settings.register_profile(
    "thorough", max_examples=5000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(
    os.environ.get("SEQBALANCE_HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev")
)

REQUIRE_INTEGRATIONS = "--require-integrations"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        REQUIRE_INTEGRATIONS,
        action="store_true",
        default=False,
        help="fail, instead of skipping, an integration test whose dependencies are missing "
        "(and any test module skipped at collection)",
    )


def pytest_configure(config: pytest.Config) -> None:
    # Also declared in pyproject.toml; repeated here so a run with another ini file knows it.
    config.addinivalue_line(
        "markers",
        "integration: needs torch, Ray, verl, TransferQueue or transformers "
        "(run by make test-integrations)",
    )


def _required(config: pytest.Config) -> bool:
    return bool(config.getoption(REQUIRE_INTEGRATIONS))


def _skip_reason(longrepr: object) -> str:
    # A skip's longrepr is (path, line, "Skipped: reason").
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    if report.skipped and _required(item.config) and item.get_closest_marker("integration"):
        reason = _skip_reason(report.longrepr)
        report.outcome = "failed"
        report.longrepr = (
            f"{REQUIRE_INTEGRATIONS}: integration test {item.nodeid} was skipped ({reason}); "
            "install what .ci/requirements-integration.txt names"
        )


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    if report.skipped and _required(collector.config):
        reason = _skip_reason(report.longrepr)
        report.outcome = "failed"
        report.longrepr = (
            f"{REQUIRE_INTEGRATIONS}: {collector.nodeid} was skipped at collection ({reason}); "
            "install what .ci/requirements-integration.txt names"
        )
