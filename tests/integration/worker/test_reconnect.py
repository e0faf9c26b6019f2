"""The worker survives the broker closing its connection: it reconnects, re-declares and
keeps consuming, and a delivery whose ack was lost is redelivered, never dropped."""

from __future__ import annotations

import asyncio
import subprocess

from rabbitq import Message, RetryPolicy, Worker
from rabbitq._amqp.connection import HEARTBEAT, connect
from tests.helpers import Recorder, running, wait_for


class Ping(Message, type="test.reconnect.ping"):
    n: int


def close_connections_named(name: str) -> int:
    """Close (as the broker would on a network fault) every connection called ``name``."""
    out = subprocess.run(
        ["rabbitmqctl", "list_connections", "pid", "client_properties", "-q", "--no-table-headers"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    closed = 0
    for line in out.splitlines():
        pid, _, props = line.partition("\t")
        if f'"{name}"' in props or f'<<"{name}">>' in props:
            subprocess.run(
                ["rabbitmqctl", "close_connection", pid, "test: simulated fault"],
                check=True,
                capture_output=True,
            )
            closed += 1
    return closed


async def test_a_worker_whose_connection_is_closed_reconnects_and_loses_nothing(make_app):
    app = make_app(retry=RetryPolicy(delays=(0.2,)), prefetch=10)
    release = asyncio.Event()
    handled: list[int] = []

    @app.handler(Ping)
    async def ping(msg: Ping) -> None:
        if msg.n < 5:
            await release.wait()  # in flight while the connection is cut
        handled.append(msg.n)

    rec = Recorder()
    drops: list[bool] = []
    rec.connection_changed = lambda up: drops.append(up)  # type: ignore[method-assign]
    worker = Worker(app, hooks=rec, grace_period=5)
    async with running(worker), app.publisher() as pub:
        await pub.publish_many([Ping(n=i) for i in range(5)])
        await wait_for(lambda: len(worker._handling) == 5)
        assert await asyncio.to_thread(close_connections_named, f"rabbitq worker {app.queue}") == 1
        # A latch, not the ready flag: rabbitmqctl may return after the worker is back.
        await wait_for(lambda: False in drops, timeout=10)
        release.set()  # the five finish, but their acks cannot be sent
        await wait_for(worker.ready.is_set, timeout=30)
        await pub.publish_many([Ping(n=i) for i in range(5, 10)])
        # the five in-flight ones come back (redelivered) and are handled again
        await wait_for(lambda: set(handled) == set(range(10)) and len(handled) >= 15)
    assert sorted(set(handled)) == list(range(10))
    assert len(handled) - len(set(handled)) == 5  # the redeliveries, counted


def heartbeat_of(name: str) -> int:
    """The heartbeat (seconds) the broker negotiated for the connection called ``name``."""
    out = subprocess.run(
        ["rabbitmqctl", "list_connections", "timeout", "client_properties", "-q"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    [timeout] = [line.split("\t")[0] for line in out.splitlines() if f'"{name}"' in line]
    return int(timeout)


async def test_connections_beat_every_15_s_unless_the_url_says_otherwise(broker_url, uid):
    # A stalled (half-open) link is then noticed in about 30 s, not in three minutes.
    default = await connect(broker_url, name=f"hb default {uid}")
    chosen = await connect(f"{broker_url}?heartbeat=7", name=f"hb chosen {uid}")
    try:
        assert await asyncio.to_thread(heartbeat_of, f"hb default {uid}") == HEARTBEAT == 15
        assert await asyncio.to_thread(heartbeat_of, f"hb chosen {uid}") == 7
    finally:
        await default.close()
        await chosen.close()
