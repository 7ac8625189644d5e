"""The fault-injection suite's bookkeeping: every test here says what a failure of it would mean.

``@pytest.mark.fault("data_loss")``: it checks that nothing already indexed is lost;
``@pytest.mark.fault("hidden_failure")``: that a fault is reported (clear error, exit code, failed
result), never passed off as a good answer; ``@pytest.mark.fault("clear_error")``: that bad input
gets a clear error instead of a crash. With ``RAGKIT_RELIABILITY_REPORT=path`` the session writes
``{"cases", "passed", "data_loss", "hidden_failures"}`` there (``make reliability`` writes
``bench/results/reliability.json``): the counts are of failed tests of each kind.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # fake_openai

KINDS = ("data_loss", "hidden_failure", "clear_error")
_outcomes: dict[str, tuple[str, bool]] = {}


def _kind(item) -> str:
    marker = item.get_closest_marker("fault")
    return marker.args[0] if marker is not None and marker.args and marker.args[0] in KINDS else "unclassified"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if Path(str(item.fspath)).parent != Path(__file__).parent:
        return
    if report.when == "call" or (report.when == "setup" and report.failed):
        _outcomes[item.nodeid] = (_kind(item), report.passed)


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("RAGKIT_RELIABILITY_REPORT")
    if not path or not _outcomes:
        return
    failed = [kind for kind, passed in _outcomes.values() if not passed]
    summary = {
        "cases": len(_outcomes),
        "passed": sum(passed for _, passed in _outcomes.values()),
        "data_loss": failed.count("data_loss"),
        # an unclassified failure is counted as hidden: nothing says it was reported
        "hidden_failures": failed.count("hidden_failure") + failed.count("unclassified"),
        "command": "make reliability",
        "by_kind": {kind: sum(1 for k, _ in _outcomes.values() if k == kind) for kind in (*KINDS, "unclassified")},
    }
    Path(path).write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
