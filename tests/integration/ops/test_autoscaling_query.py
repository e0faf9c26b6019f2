"""The KEDA recipe's query (deploy/k8s/keda-scaledobject.yaml) against a real Prometheus
scraping a real, busy worker.

An app with two priority lanes and ``prefetch=4`` whose handler waits at a gate: every
delivery it takes stays unacked. Its worker serves ``/metrics`` (as ``rabbitq worker
--metrics-port`` does) to a private Prometheus. Through Prometheus's HTTP API:

- with 4 messages in each lane, the worker holds all 8 (each lane takes up to twice
  the prefetch; 4 handlers run, the rest wait for a slot in the lane gate): RabbitMQ has
  0 ready (what KEDA's AMQP ``QueueLength`` trigger counted, and so scaled the fleet
  in); the recipe's query reports the 8, no fewer than ``rabbitq_messages_in_flight``;
- with 20 more in lane 0, which the worker cannot take, the query reports all 28: the
  ready ones and the held ones, over both lanes;
- once the gate opens and everything is handled, it reports 0.
"""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry

from rabbitq import Context, Message, Metrics, PriorityWorker, Worker, serve_metrics
from rabbitq._amqp.lanes import lane_queue
from tests import promql
from tests.helpers import running, wait_for
from tests.prometheus_server import Prom, prometheus_or_skip, run_prometheus

pytestmark = [pytest.mark.broker, pytest.mark.slow]

PREFETCH = 4
DEADLINE = 45.0  # seconds for any one wait below


class Task(Message, type="test.autoscale.task"):
    n: int


async def _equals(prom: Prom, expr: str, want: float) -> bool:
    return await prom.value(expr) == want


async def test_the_keda_query_counts_a_busy_workers_unacked_deliveries_and_every_lane(
    make_app, broker_url, tmp_path
):
    binary = prometheus_or_skip()
    app = make_app(priorities=2, prefetch=PREFETCH)
    gate = asyncio.Event()
    handled: list[int] = []

    @app.handler(Task)
    async def handle(task: Task, ctx: Context) -> None:
        await gate.wait()
        handled.append(task.n)

    query = promql.keda_query(app.queue)
    lanes = [lane_queue(app.queue, level) for level in (0, 1)]
    # What KEDA's rabbitmq trigger in QueueLength mode read: the main queue's ready count.
    ready_only = f'max(rabbitq_queue_messages{{queue="{app.queue}"}})'
    running_now = "sum(rabbitq_messages_in_flight)"
    metrics = Metrics(CollectorRegistry())
    worker = PriorityWorker(app, hooks=metrics)
    async with (
        serve_metrics(worker, metrics, port=0, bind="127.0.0.1", sample_interval=0.5) as server,
        running(worker),
        run_prometheus(binary, tmp_path, f"127.0.0.1:{server.port}") as base,
    ):
        prom = Prom(base)
        await wait_for(prom.ready, timeout=DEADLINE)
        await wait_for(lambda: _equals(prom, query, 0), timeout=DEADLINE)
        async with app.publisher() as pub:
            for n in range(PREFETCH):
                await pub.publish(Task(n=n))
                await pub.publish(Task(n=100 + n), priority=1)

            # Busy: every delivery held by the worker, its handlers running, nothing ready.
            held = "sum(rabbitq_messages_unacked)"
            await wait_for(lambda: _equals(prom, held, 2 * PREFETCH), timeout=DEADLINE)
            await wait_for(lambda: _equals(prom, query, 2 * PREFETCH), timeout=DEADLINE)
            ready = {
                r["metric"]["queue"]: float(r["value"][1])
                for r in await prom.query("rabbitq_queue_messages{kind='main'}")
            }
            assert {q: ready.get(q) for q in lanes} == {q: 0 for q in lanes}
            assert await prom.value(ready_only) == 0  # the old trigger: scale in
            assert (await prom.value(running_now) or 0) >= PREFETCH
            assert (await prom.value(query) or 0) >= (await prom.value(running_now) or 0)

            # A backlog in lane 0 besides: the ready ones count too.
            for n in range(20):
                await pub.publish(Task(n=200 + n))
            await wait_for(lambda: _equals(prom, query, 2 * PREFETCH + 20), timeout=DEADLINE)
            assert (await prom.value(ready_only) or 0) < 2 * PREFETCH + 20

        gate.set()
        await wait_for(lambda: len(handled) == 2 * PREFETCH + 20, timeout=DEADLINE)
        await wait_for(lambda: _equals(prom, query, 0), timeout=DEADLINE)
    assert sorted(handled) == sorted(
        [*range(PREFETCH), *range(100, 100 + PREFETCH), *range(200, 220)]
    )


async def test_a_worker_reports_the_deliveries_it_holds_unacked_until_each_is_settled(make_app):
    """Without Prometheus: a worker with ``prefetch=3`` and a gated handler holds 3 of 5
    messages (``rabbitq_messages_unacked`` 3), then settles all 5 (0)."""
    app = make_app(prefetch=3)
    gate = asyncio.Event()
    handled: list[int] = []

    @app.handler(Task)
    async def handle(task: Task, ctx: Context) -> None:
        await gate.wait()
        handled.append(task.n)

    metrics = Metrics(CollectorRegistry())

    def unacked() -> float | None:
        return metrics.registry.get_sample_value("rabbitq_messages_unacked", {"queue": app.queue})

    async with running(Worker(app, hooks=metrics)), app.publisher() as pub:
        for n in range(5):
            await pub.publish(Task(n=n))
        await wait_for(lambda: unacked() == 3, timeout=DEADLINE)
        gate.set()
        await wait_for(lambda: len(handled) == 5, timeout=DEADLINE)
        await wait_for(lambda: unacked() == 0, timeout=DEADLINE)
    assert sorted(handled) == [0, 1, 2, 3, 4]
