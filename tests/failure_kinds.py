"""What kind of failure a red test is, said in the run's last lines.

A failed test is either **timing under load**: a wait for work to settle ran out of time
(:class:`SettleTimeout`, raised by :func:`tests.helpers.wait_for` and the harnesses'
settle loops), a ``TimeoutError`` (``asyncio.timeout``, ``asyncio.wait_for``), a
subprocess that did not finish in time, or pytest-timeout's per-test timeout; or a
**broken promise**: anything else (a count, a status, an error that should not be).

The kind is decided where the test ran (:func:`pytest_runtest_makereport`, in the xdist
worker) and carried to the controller in the report's ``user_properties``, with the
1-minute load average of that moment; :func:`pytest_terminal_summary` prints the last
lines, after pytest's short summary::

    2 failed: 1 broken promise, 1 timing under load
    broken promise: tests/x.py::test_y
    timing under load: tests/a.py::test_b: waited 60 s for the ticks; load average 12.3

tests/conftest.py registers both hooks; any pytest run takes them with
``-p tests.failure_kinds``.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Generator, Iterable, Sequence
from typing import Any, NamedTuple

import pytest

TIMING = "timing under load"
BROKEN = "broken promise"
KIND = "failure_kind"
"""The ``user_properties`` names the kind, its detail and the load average travel under."""
DETAIL = "failure_detail"
LOAD = "failure_load_average"

PYTEST_TIMEOUT = "Timeout (>"
"""How pytest-timeout's failure message starts (``Timeout (>120.0s) from pytest-timeout.``)."""


class SettleTimeout(AssertionError):
    """A wait for work to settle ran out of time: what was awaited, and for how long.
    An ``AssertionError``, so that a test that expects one still reads as before."""

    def __init__(self, what: str, waited: float) -> None:
        super().__init__(f"waited {waited:g} s for {what}")
        self.what = what
        self.waited = waited


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _timing_detail(exc: BaseException) -> str | None:
    """What ran out of time, or None when ``exc`` is not a timeout."""
    if isinstance(exc, SettleTimeout):
        return str(exc)
    if isinstance(exc, TimeoutError):
        return f"TimeoutError: {exc}" if str(exc) else "TimeoutError"
    if isinstance(exc, subprocess.TimeoutExpired):
        return f"{exc}"
    message = str(exc)
    if type(exc).__name__ == "Failed" and message.startswith(PYTEST_TIMEOUT):
        return f"the test's own timeout ({message.split(')')[0].removeprefix('Timeout (')})"
    return None


def classify(exc: BaseException) -> tuple[str, str]:
    """``(kind, detail)`` of a test's failure: :data:`TIMING` when every exception it
    raised (each leaf of an exception group) is a timeout, else :data:`BROKEN`."""
    details = [_timing_detail(leaf) for leaf in _leaves(exc)]
    if details and all(d is not None for d in details):
        return TIMING, "; ".join(d for d in details if d is not None).splitlines()[0]
    return BROKEN, ""


class Failure(NamedTuple):
    """One failed phase of a test, as the controller reads it from the report."""

    nodeid: str
    when: str
    kind: str
    detail: str = ""
    load: float | None = None


def summary_lines(failures: Sequence[Failure]) -> list[str]:
    """The run's last lines: the count of each kind, then one line per failure, broken
    promises first (a timing failure with what it waited for and the load average)."""
    if not failures:
        return []
    counts = {kind: sum(1 for f in failures if f.kind == kind) for kind in (BROKEN, TIMING)}
    head = ", ".join(f"{n} {kind}" for kind, n in counts.items() if n)
    lines = [f"{len(failures)} failed: {head}"]
    for f in sorted(failures, key=lambda f: (f.kind != BROKEN, f.nodeid)):
        where = f.nodeid if f.when == "call" else f"{f.nodeid} (at {f.when})"
        load = "" if f.load is None or f.kind == BROKEN else f"load average {f.load:.1f}"
        notes = "; ".join(n for n in (f.detail, load) if n)
        lines.append(f"{f.kind}: {where}" + (f": {notes}" if notes else ""))
    return lines


def _load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:  # not every platform has one
        return None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed phase's report carries its kind, detail and load average."""
    report = yield
    if report.failed and call.excinfo is not None:
        kind, detail = classify(call.excinfo.value)
        report.user_properties += [(KIND, kind), (DETAIL, detail), (LOAD, _load_average())]
    return report


def failures(reports: Iterable[Any]) -> list[Failure]:
    """The failed phases among ``reports`` (a failure the hook above did not see, such
    as a crashed xdist worker or a collection error, is a broken promise)."""
    out = []
    for report in reports:
        if not getattr(report, "failed", False) or not hasattr(report, "nodeid"):
            continue
        props = dict(getattr(report, "user_properties", ()))
        out.append(
            Failure(
                report.nodeid,
                getattr(report, "when", None) or "call",
                props.get(KIND, BROKEN),
                props.get(DETAIL, ""),
                props.get(LOAD),
            )
        )
    return out


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_terminal_summary(
    terminalreporter: Any, exitstatus: int, config: pytest.Config
) -> Generator[None, None, None]:
    """After pytest's own summary (this wrapper is the outermost), the failures by kind."""
    yield
    stats = terminalreporter.stats
    lines = summary_lines(failures([*stats.get("failed", ()), *stats.get("error", ())]))
    if lines:
        terminalreporter.write_sep("=", "failures by kind", red=True)
        for line in lines:
            terminalreporter.write_line(line)
