"""How an app with priorities is run (rabbitq._worker.laned), without a broker: by a
PriorityWorker of one lane worker each, never by a plain Worker."""

from __future__ import annotations

import pytest

from rabbitq import App, ConfigurationError, Message, PriorityWorker, Worker
from rabbitq._ops.run import WorkerSpec, worker_for
from rabbitq._worker.lane_gate import LaneStage
from rabbitq._worker.laned import WAITING_ROOM


class Job(Message, type="laned.job"):
    n: int


def _app(**kwargs: object) -> App:
    app = App(queue="jobs", prefetch=4, **kwargs)  # type: ignore[arg-type]
    app.handler(Job)(lambda m: None)
    return app


def test_rabbitq_worker_runs_a_priority_worker_with_one_lane_worker_each():
    worker = worker_for(_app(priorities=3), WorkerSpec(app_spec="-"), hooks=None)
    assert isinstance(worker, PriorityWorker)
    assert [w.app.queue for w in worker.lanes] == ["jobs", "jobs.prio.1", "jobs.prio.2"]
    assert [w.app.lane for w in worker.lanes] == [0, 1, 2]
    assert {w.prefetch for w in worker.lanes} == {4 * WAITING_ROOM}  # room to choose from
    assert worker.gate.slots == 4  # what runs at once: the app's prefetch
    for level, lane in enumerate(worker.lanes):
        first = lane.app.delivery_stages[0]
        assert isinstance(first, LaneStage) and first.level == level
        assert lane.topology == worker.topology  # the whole app's, one DLQ
    assert worker.app.queue == "jobs" and worker.whole.delivery_stages == ()  # a view each


def test_a_plain_app_keeps_its_plain_worker_and_a_plain_worker_refuses_priorities():
    assert type(worker_for(_app(), WorkerSpec(app_spec="-"), hooks=None)) is Worker
    with pytest.raises(ConfigurationError, match=r"runs with PriorityWorker") as caught:
        Worker(_app(priorities=2))
    assert "\n" not in str(caught.value)
    with pytest.raises(ConfigurationError, match="has no priorities"):
        PriorityWorker(_app())
