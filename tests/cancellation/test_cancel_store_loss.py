"""Cancellations and a Redis that loses its data, on a private Redis (tests/redis_node.py;
never the shared one), with a real broker and worker:

- without persistence, each cancel report says ``durable=False`` (and its text says a
  restart loses it); restarted empty, the worker that saw the store before logs one
  WARNING naming the time before which cancellations may be lost;
- with an AOF (``appendonly yes``), the reports say ``durable=True``, and after the
  restart no cancelled message runs and nothing is logged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import pytest

from rabbitq import App, Message, Worker
from rabbitq.backends import RedisBackend
from rabbitq.cancellation import model
from rabbitq.cancellation.cancel import close_stores
from rabbitq.status import MessageStatus
from tests.helpers import declare_topology, running, wait_for
from tests.redis_node import RedisNode

pytestmark = [pytest.mark.services, pytest.mark.broker]

COUNT = 20


class Job(Message, type="test.cancel.loss.job"):
    n: int


async def cancelled_then_restarted(
    make_app: Callable[..., App], connection: object, *, persist: bool
) -> tuple[list[model.CancelReport], list[int], list[str]]:
    """Run a first message (the worker sees the store), publish :data:`COUNT` delayed
    ones and cancel them, restart the Redis, wait until they arrived: the reports, the
    ``n`` of each that ran, the WARNING lines about lost cancellations."""
    with RedisNode.started(persist=persist) as node:
        app = make_app(
            backend=RedisBackend(node.url, key_prefix="loss:"), cancellable=True,
            queue_type="classic",
        )  # fmt: skip
        ran: list[int] = []

        @app.handler(Job)
        async def job(msg: Job) -> None:
            ran.append(msg.n)

        await declare_topology(connection, app)
        warnings: list[str] = []
        handler = _Collect(warnings)
        logging.getLogger("rabbitq.worker").addHandler(handler)
        try:
            async with running(Worker(app)):
                async with app.publisher() as pub:
                    await pub.publish(Job(n=-1))
                    await wait_for(lambda: -1 in ran, timeout=30)
                    ids = [await pub.publish(Job(n=n), delay=4) for n in range(COUNT)]
                reports = await app.cancel(*ids)
                await asyncio.to_thread(node.restart, 0.5)

                async def all_arrived() -> bool:  # ran, or acked unrun by the worker
                    found = [await app.status(mid) for mid in ids]
                    return all(map(settled_by_worker, found))

                await wait_for(all_arrived, timeout=60, interval=0.3)
                await asyncio.sleep(1.0)  # anything that would run late, runs now
        finally:
            logging.getLogger("rabbitq.worker").removeHandler(handler)
            await close_stores(app)
    lost = [w for w in warnings if "may be lost" in w]
    return reports, [n for n in ran if n >= 0], lost


def settled_by_worker(status: MessageStatus | None) -> bool:
    """It ran, or the worker acked it unrun (its last record has an attempt)."""
    if status is None or status.state not in ("succeeded", "cancelled"):
        return False
    return status.history[-1].attempt is not None


class _Collect(logging.Handler):
    def __init__(self, into: list[str]) -> None:
        super().__init__(logging.WARNING)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append(record.getMessage())


@pytest.mark.timeout(120)
async def test_without_persistence_the_report_and_the_worker_say_so(make_app, connection) -> None:
    reports, ran, lost = await cancelled_then_restarted(make_app, connection, persist=False)
    print(f"no AOF: {len(ran)} of {COUNT} cancelled messages ran; {len(lost)} warning(s)")
    assert [r.durable for r in reports] == [False] * COUNT
    assert all(r.stops_it and r.text.endswith(model.NOT_DURABLE) for r in reports)
    assert len(lost) == 1, lost
    assert "cancellations recorded before" in lost[0]


@pytest.mark.timeout(120)
async def test_with_an_aof_cancellations_outlive_a_restart(make_app, connection) -> None:
    reports, ran, lost = await cancelled_then_restarted(make_app, connection, persist=True)
    print(f"AOF: {len(ran)} of {COUNT} cancelled messages ran; {len(lost)} warning(s)")
    assert [r.durable for r in reports] == [True] * COUNT
    assert ran == [] and lost == []
