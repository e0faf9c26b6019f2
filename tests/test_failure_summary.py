"""A red run's last lines say which failures are timing under load (a wait that ran out
of time) and which are broken promises (tests/failure_kinds.py), in one process and
under pytest-xdist alike."""

from __future__ import annotations

import subprocess

import pytest

from tests.failure_kinds import (
    BROKEN,
    TIMING,
    Failure,
    SettleTimeout,
    classify,
    summary_lines,
)
from tests.helpers import ROOT, wait_for

pytest_plugins = ["pytester"]

FAKE_TESTS = """
import asyncio, time, pytest
from tests.helpers import wait_for

def test_a_count_that_is_wrong():
    assert 1 == 2

def test_a_settle_that_runs_out_of_time():
    rec = []
    asyncio.run(wait_for(lambda: len(rec) == 5, timeout=0.2))

def test_an_asyncio_timeout():
    async def main():
        async with asyncio.timeout(0.05):
            await asyncio.sleep(5)
    asyncio.run(main())

@pytest.mark.timeout(1)
def test_the_test_timeout():
    time.sleep(5)

@pytest.fixture
def settled():
    raise AssertionError("the fixture's own promise")

def test_a_fixture_that_fails(settled):
    pass

def test_that_passes():
    pass
"""


def test_a_settle_timeout_is_timing_and_says_what_was_awaited() -> None:
    assert classify(SettleTimeout("the ticks", 60)) == (TIMING, "waited 60 s for the ticks")


def test_timeouts_of_asyncio_subprocess_and_pytest_timeout_are_timing() -> None:
    assert classify(TimeoutError())[0] == TIMING
    assert classify(TimeoutError("slow")) == (TIMING, "TimeoutError: slow")
    assert classify(subprocess.TimeoutExpired(["rabbitq"], 5))[0] == TIMING
    failed = pytest.fail.Exception("Timeout (>120.0s) from pytest-timeout.")
    assert classify(failed) == (TIMING, "the test's own timeout (>120.0s)")


def test_anything_else_is_a_broken_promise() -> None:
    assert classify(AssertionError("assert 49 >= 55")) == (BROKEN, "")
    assert classify(RuntimeError("Timeout (>1s)"))[0] == BROKEN
    assert classify(pytest.fail.Exception("the worker ended"))[0] == BROKEN


def test_an_exception_group_is_timing_only_when_every_leaf_is() -> None:
    timing = ExceptionGroup("g", [TimeoutError(), SettleTimeout("x", 1)])
    assert classify(timing)[0] == TIMING
    mixed = ExceptionGroup("g", [TimeoutError(), ExceptionGroup("h", [AssertionError()])])
    assert classify(mixed)[0] == BROKEN


def test_the_summary_counts_each_kind_and_lists_broken_promises_first() -> None:
    lines = summary_lines(
        [
            Failure("tests/a.py::b", "call", TIMING, "waited 60 s for the ticks", 12.34),
            Failure("tests/x.py::y", "call", BROKEN, "", 3.0),
            Failure("tests/x.py::z", "setup", BROKEN, "", None),
        ]
    )
    assert lines == [
        "3 failed: 2 broken promise, 1 timing under load",
        "broken promise: tests/x.py::y",
        "broken promise: tests/x.py::z (at setup)",
        "timing under load: tests/a.py::b: waited 60 s for the ticks; load average 12.3",
    ]
    assert summary_lines([]) == []


async def test_wait_for_raises_a_settle_timeout_naming_its_lambda() -> None:
    seen: list[int] = []
    with pytest.raises(SettleTimeout, match=r"waited 0.1 s for lambda: len\(seen\) == 3$"):
        await wait_for(lambda: len(seen) == 3, timeout=0.1)
    with pytest.raises(SettleTimeout, match="waited 0.1 s for the three items$"):
        await wait_for(lambda: False, timeout=0.1, what="the three items")


@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_red_run_ends_with_its_failures_by_kind(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, workers: str
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    pytester.makepyfile(test_fake=FAKE_TESTS)
    result = pytester.runpytest_subprocess(
        "-p", "tests.failure_kinds", "-p", "no:randomly", "-n", workers, "-rfE"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    lines = result.outlines
    start = next(i for i, line in enumerate(lines) if "failures by kind" in line)
    assert any("short test summary info" in line for line in lines[:start])
    block, last = lines[start + 1 : -1], lines[-1]
    assert "4 failed, 1 passed, 1 error" in last
    assert block[0] == "5 failed: 2 broken promise, 3 timing under load"
    assert block[1:3] == [
        "broken promise: test_fake.py::test_a_count_that_is_wrong",
        "broken promise: test_fake.py::test_a_fixture_that_fails (at setup)",
    ]
    timing = dict(line.split(": ", 2)[1:] for line in block[3:])
    assert sorted(timing) == [
        "test_fake.py::test_a_settle_that_runs_out_of_time",
        "test_fake.py::test_an_asyncio_timeout",
        "test_fake.py::test_the_test_timeout",
    ]
    settle = timing["test_fake.py::test_a_settle_that_runs_out_of_time"]
    assert settle.startswith("waited 0.2 s for lambda: len(rec) == 5; load average ")
    assert timing["test_fake.py::test_an_asyncio_timeout"].startswith("TimeoutError; load")
    assert timing["test_fake.py::test_the_test_timeout"].startswith("the test's own timeout")
