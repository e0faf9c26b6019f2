"""Debounce and a key store that loses its data or goes away, on a private Redis
(tests/redis_node.py; never the shared one), with a real broker and worker:

- restarted empty after its bursts were published: every burst's last payload runs (a
  stale one may run too), none is lost as "superseded";
- down while the debounced messages arrive: they are held in the delay ladder without
  using an attempt, and each burst's last runs once the store is back; none reaches
  the DLQ as ``exhausted``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from rabbitq import App, Message, RetryPolicy, Worker
from rabbitq.backends import RedisBackend
from tests.helpers import declare_topology, queue_depth, running, wait_for
from tests.redis_node import RedisNode
from tests.unique.conftest import close_stores

pytestmark = [pytest.mark.services, pytest.mark.broker]

KEYS, BURST = 10, 5


class Digest(Message, type="test.unique.loss.digest"):
    user: int
    n: int


def debounced_app(make_app: Callable[..., App], url: str) -> tuple[App, list[tuple[int, int]]]:
    """An app whose only store is a status store on ``url`` (its key store beside it),
    with one retry: a store outage that used attempts would exhaust it at once."""
    app = make_app(
        status=RedisBackend(url, key_prefix="loss:").status(), debounce=True,
        retry=RetryPolicy(delays=(0.5,)), queue_type="classic",
    )  # fmt: skip
    runs: list[tuple[int, int]] = []

    @app.handler(Digest)
    async def digest(msg: Digest) -> None:
        runs.append((msg.user, msg.n))

    return app, runs


async def publish_bursts(app: App, wait: float) -> None:
    async with app.publisher() as pub:
        for n in range(BURST):
            await asyncio.gather(
                *(pub.publish(Digest(user=k, n=n), debounce=wait, unique_key=f"d:{k}")
                  for k in range(KEYS))
            )  # fmt: skip


def lasts_ran(runs: list[tuple[int, int]]) -> int:
    return sum((k, BURST - 1) in runs for k in range(KEYS))


@pytest.mark.timeout(180)
async def test_a_store_restarted_empty_loses_no_burst(make_app, connection) -> None:
    with RedisNode.started() as node:
        app, runs = debounced_app(make_app, node.url)
        await declare_topology(connection, app)
        try:
            await publish_bursts(app, wait=2)
            await asyncio.to_thread(node.restart, 0.2)  # every debounce record is gone
            async with running(Worker(app)):
                try:
                    await wait_for(lambda: lasts_ran(runs) == KEYS, timeout=60, interval=0.2)
                finally:
                    print(f"restarted empty: {lasts_ran(runs)} of {KEYS} bursts ran their last "
                          f"payload ({len(runs)} runs of {KEYS * BURST} messages)")  # fmt: skip
                await asyncio.sleep(1.0)
        finally:
            await close_stores(app)
    assert sorted({(k, n) for k, n in runs if n == BURST - 1}) == [
        (k, BURST - 1) for k in range(KEYS)
    ]
    assert len(runs) <= KEYS * BURST  # a stale payload may run, none twice


@pytest.mark.timeout(180)
async def test_a_store_down_as_they_arrive_holds_them(make_app, connection) -> None:
    with RedisNode.started(persist=True) as node:
        app, runs = debounced_app(make_app, node.url)
        await declare_topology(connection, app)
        dlq = app.topology().dlq.name
        try:
            await publish_bursts(app, wait=1)
            await asyncio.to_thread(node.kill)
            async with running(Worker(app)):
                await asyncio.sleep(8)  # they arrive after 1 s, and find no store
                held = len(runs)
                await asyncio.to_thread(node.start)  # its AOF brings the records back
                try:
                    await wait_for(lambda: lasts_ran(runs) == KEYS, timeout=60, interval=0.2)
                finally:
                    dead = await queue_depth(connection, dlq)
                    print(f"store down: {held} ran while down, then {lasts_ran(runs)} of "
                          f"{KEYS} bursts ran; {dead} in the DLQ")  # fmt: skip
                await asyncio.sleep(1.0)
        finally:
            await close_stores(app)
    assert held == 0
    assert sorted(runs) == [(k, BURST - 1) for k in range(KEYS)]
    assert await queue_depth(connection, dlq) == 0
