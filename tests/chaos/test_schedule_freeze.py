"""A frozen schedule leader (``SIGSTOP``): how long until another process leads, and
every tick still published once (issue #33, item 5).

Two ``rabbitq worker`` processes run a schedule firing every second, on the shared
broker with names of this run's own (only the worker processes are stopped). The
leader is frozen until the other has taken over, three seconds more, then thawed. The
broker lets the lease (an exclusive queue) go only when it closes the frozen leader's
connection for missed heartbeats: between two and three heartbeat intervals after the
last frame. Before the scheduler's lease connection had its own heartbeat (the
connection's 15 s): 30-45 s; with :data:`rabbitq.schedule.runner.LEASE_HEARTBEAT`
(5 s): 10-15 s, plus the candidates' retry (1 s). A queue of the test's own receives
every publish, counted raw by ``message_id``. Then the new leader is frozen for 4 s,
less than two heartbeats: it keeps the lease and publishes the ticks it missed late,
once each. Times printed (``-s``).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from collections import Counter
from datetime import datetime, timedelta

import aio_pika
import pytest

from rabbitq import App

from ..failure_kinds import SettleTimeout
from ..helpers import assert_running, delete_app_objects
from .test_schedule_ticks import LEADING, Proc

pytestmark = [pytest.mark.slow, pytest.mark.services, pytest.mark.timeout(240)]

# Generous for a loaded machine, and under the old 30-45 s: a failure on the old code.
BOUND = float(os.environ.get("SCHEDULE_FREEZE_BOUND", "25"))


async def wait_until(condition, deadline: float, what: str, procs: list[Proc]) -> float:
    start = time.monotonic()
    while not condition():
        for p in procs:
            assert_running(p.proc, p.log, "a schedule worker")
        if time.monotonic() - start >= deadline:
            raise SettleTimeout(what, deadline)
        await asyncio.sleep(0.05)
    return time.monotonic() - start


async def test_a_frozen_leader_is_replaced_within_seconds_and_every_tick_goes_out_once(
    broker_url, tmp_path
):
    run = uuid.uuid4().hex[:8]
    queue, exchange = f"sched-freeze-{run}", f"sched-freeze-{run}"
    env = {**os.environ, "SCHEDULE_CHAOS_QUEUE": queue, "SCHEDULE_CHAOS_EXCHANGE": exchange}
    env.pop("RABBITQ_URL", None)
    env["PYTHONUNBUFFERED"] = "1"
    connection = await aio_pika.connect(broker_url)
    channel = await connection.channel()
    ex = await channel.declare_exchange(exchange, aio_pika.ExchangeType.TOPIC, durable=True)
    counted = await channel.declare_queue(f"{queue}.count", durable=True)
    await counted.bind(ex, "chaos.schedule.tick")
    a = Proc(broker_url, env, tmp_path / "a.log")
    procs = [a]
    try:
        await wait_until(a.leads, 60, "the first worker never led", procs)
        b = Proc(broker_url, env, tmp_path / "b.log")
        procs.append(b)
        await asyncio.sleep(4)  # b contends (refused: the lease is a's)
        assert not b.leads()
        a.proc.send_signal(signal.SIGSTOP)
        try:
            took = await wait_until(b.leads, BOUND, "no takeover from the frozen leader", [b])
            await asyncio.sleep(3)
        finally:
            a.proc.send_signal(signal.SIGCONT)
        await asyncio.sleep(6)  # the thawed leader finds its lease gone, and contends
        # A short freeze (4 s, under two heartbeats): the leader keeps its lease and
        # publishes the ticks it missed late, once each.
        b.proc.send_signal(signal.SIGSTOP)
        await asyncio.sleep(4)
        b.proc.send_signal(signal.SIGCONT)
        await asyncio.sleep(4)
        kept = b.leads()
    finally:
        for p in procs:
            if p.proc.poll() is None:
                p.proc.send_signal(signal.SIGCONT)
                p.proc.send_signal(signal.SIGTERM)
        for p in procs:
            p.proc.wait(timeout=60)

    raw: Counter[str] = Counter()
    stamps: list[datetime] = []
    while (message := await counted.get(no_ack=True, fail=False)) is not None:
        assert message.message_id is not None
        raw[message.message_id] += 1
        if message.timestamp is not None:
            stamps.append(message.timestamp)
    ticks = sorted(datetime.strptime(m.split(":")[2], "%Y%m%dT%H%M%SZ") for m in raw)
    first, last = ticks[0], ticks[-1]
    expected = {first + timedelta(seconds=n) for n in range((last - first).seconds + 1)}
    duplicates = sum(n - 1 for n in raw.values())
    stamps.sort()
    gap = max((y - x).total_seconds() for x, y in zip(stamps, stamps[1:], strict=False))
    print(
        f"\nfrozen leader: taken over {took:.1f} s after SIGSTOP; {len(raw)} ticks, "
        f"{sum(raw.values())} raw publishes, {duplicates} duplicate(s), "
        f"{len(expected - set(ticks))} missing; longest gap between publishes {gap:.0f} s; "
        f"a leader frozen 4 s {'kept' if kept else 'lost'} the lease"
    )
    try:
        assert duplicates == 0, [m for m, n in raw.items() if n > 1]
        assert set(ticks) == expected, sorted(expected - set(ticks))
        a_log = (tmp_path / "a.log").read_text(errors="replace")
        led = [line for line in a_log.splitlines() if LEADING in line and "stopped" not in line]
        assert len(led) == 1  # the thawed leader did not lead again
    finally:
        for name in (f"{queue}.count", f"{queue}.schedules"):
            await channel.queue_delete(name)
        await delete_app_objects(connection, App(queue=queue, exchange=exchange))
        await connection.close()
