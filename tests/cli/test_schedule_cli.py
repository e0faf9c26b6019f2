"""``rabbitq scheduler``, ``rabbitq schedule list`` and ``rabbitq worker --no-schedules``
as a user meets them (no broker needed)."""

from __future__ import annotations

import logging
import sys
import types
from collections.abc import Iterator
from datetime import timedelta

import pytest
from click.testing import CliRunner, Result

from rabbitq import App
from rabbitq._ops.run import WorkerSpec
from rabbitq.cli import main
from rabbitq.cli import worker as worker_cli


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    yield
    root.handlers[:], level = saved
    root.setLevel(level)


@pytest.fixture
def module(monkeypatch) -> types.ModuleType:
    mod = types.ModuleType("schedule_cli_app")
    mod.plain = App(queue="schedule-cli")  # type: ignore[attr-defined]
    mod.timed = App(queue="schedule-cli-timed")  # type: ignore[attr-defined]
    mod.timed.schedule(every=timedelta(minutes=1), name="minutely")(lambda tick: None)
    monkeypatch.setitem(sys.modules, "schedule_cli_app", mod)
    return mod


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


@pytest.mark.parametrize("command", [["scheduler"], ["schedule", "list"]])
def test_help_shows_an_example(command):
    result = run(*command, "--help")
    assert result.exit_code == 0
    assert "Example:" in result.output
    assert f"rabbitq {' '.join(command)} myservice:app" in result.output


def test_the_scheduler_refuses_an_app_without_schedules_in_one_line(module):
    result = run("scheduler", "schedule_cli_app:plain")
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        "Error: schedule_cli_app:plain has no schedules (@app.schedule)"
    ]


def test_worker_no_schedules_reaches_the_worker_spec(module, monkeypatch):
    specs: list[WorkerSpec] = []
    monkeypatch.setattr(worker_cli, "run", specs.append)
    assert run("worker", "schedule_cli_app:timed").exit_code == 0
    assert run("worker", "schedule_cli_app:timed", "--no-schedules").exit_code == 0
    assert [s.schedules for s in specs] == [True, False]
