"""The one worker wiring: ``rabbitq worker`` and every ``--processes`` child go through
:func:`rabbitq._ops.run.run` with a :class:`WorkerSpec` (no broker needed here)."""

from __future__ import annotations

import ast
import dataclasses
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

import rabbitq
from rabbitq._ops import run as run_module
from rabbitq._ops.run import WorkerSpec
from rabbitq._ops.supervisor import Supervisor
from rabbitq.cli import main

APP = "examples.email_service:app"


@pytest.fixture
def calls(monkeypatch) -> Iterator[list[tuple[str, object]]]:
    """Runs nothing: records the loop each worker would run on, and the exit policy."""
    seen: list[tuple[str, object]] = []

    def fake_loop_run(main, *, loop="auto"):
        main.close()
        seen.append(("loop", loop))

    monkeypatch.setattr(run_module.loop, "run", fake_loop_run)
    monkeypatch.setattr(run_module, "exit_if_handlers_stuck", lambda: seen.append(("exit", 1)))
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    yield seen
    root.handlers[:], _ = saved[0], root.setLevel(saved[1])


def test_rabbitq_worker_runs_its_spec_through_the_one_wiring_on_the_auto_loop(calls, monkeypatch):
    specs: list[WorkerSpec] = []
    real = run_module.run
    monkeypatch.setattr("rabbitq.cli.worker.run", lambda spec: (specs.append(spec), real(spec)))
    result = CliRunner().invoke(main, ["worker", APP, "--prefetch", "7", "--grace-period", "3"])
    assert result.exit_code == 0, result.output
    assert [(s.app_spec, s.prefetch, s.grace_period, s.loop) for s in specs] == [
        (APP, 7, 3.0, "auto")
    ]
    assert calls == [("loop", "auto"), ("exit", 1)]


def test_a_supervised_child_runs_the_same_spec_on_the_same_loop_without_serving_http(calls):
    spec = WorkerSpec(app_spec=APP, prefetch=5, metrics_port=9100)
    supervisor = Supervisor(spec, processes=2)
    assert supervisor.child_spec == dataclasses.replace(spec, metrics_port=None)
    assert supervisor.metrics_port == 9100  # the supervisor serves the sum
    status = [0.0] * 4
    child = run_module.Child(number=2, status=status, index=1, supervisor_pid=-1)
    run_module.run(supervisor.child_spec, child=child)
    assert calls == [("loop", "auto"), ("exit", 1)]


def test_only_the_wiring_builds_a_worker_for_the_cli_and_the_supervisor():
    package = Path(rabbitq.__file__).parent
    builders = []
    for path in sorted([*package.glob("cli/*.py"), *package.glob("_ops/*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Worker":
                builders.append(path.relative_to(package).as_posix())
    assert builders == ["_ops/run.py"]
