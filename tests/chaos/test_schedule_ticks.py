"""Every tick of a schedule published once while its workers are killed over and over.

Three ``rabbitq worker`` processes run a schedule that fires every second, on a private
node. For 60 seconds (the issue asks for 2 minutes: ``SCHEDULE_CHAOS_SECONDS=120`` runs
that; 60 s keeps CI's budget and still gives ~20 kill rounds), each round ``kill -9``s
two of them, the one leading the schedules always among them, and restarts them. A
queue of the test's own, bound to the tick's type, receives every publish: counted raw,
by ``message_id``, before any dedup. Once the kills stop and the ticks due by then are
published (a takeover publishes the ticks it missed, ``catch_up="all"``: a tick
published late is not a missed one), every second from the first tick to the end of the
kills is there, and none twice. What is counted is the promise, not the machine's speed:
on a loaded machine the kills go on until 10 rounds fell after the first tick (at most
twice the duration), and the ticks due are waited for with a generous timeout.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aio_pika
import pytest

from rabbitq import App
from rabbitq.schedule import plan

from ..helpers import assert_running, delete_app_objects

ROOT = Path(__file__).resolve().parents[2]
# seconds of kills: 60 in the suite; SCHEDULE_CHAOS_SECONDS=120 runs the 2 minutes
DURATION = float(os.environ.get("SCHEDULE_CHAOS_SECONDS", "60"))

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2 * DURATION + 240)]
MIN_ROUNDS = 10  # kill rounds after the first tick: the test's power, not a promise
SETTLE = 90.0  # seconds for the ticks due at the end of the kills to be published
LEADING = "leading the schedules of"


class Proc:
    """One ``rabbitq worker`` of tests.chaos.schedule_service:app, logging to a file."""

    def __init__(self, url: str, env: dict[str, str], log: Path) -> None:
        self.log = log
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "rabbitq", "worker", "tests.chaos.schedule_service:app",
                 "--url", url, "--log-level", "info", "--grace-period", "1"],
                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip

    def leads(self) -> bool:
        text = self.log.read_text(errors="replace")
        return self.proc.poll() is None and text.rfind(LEADING) > text.rfind("stopped leading")

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)


def tick_of(message_id: str) -> datetime:
    """The tick a tick message's id names (``...:YYYYmmddTHHMMSSZ``), in UTC."""
    return datetime.strptime(message_id.split(":")[2], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)


def utc_second() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


async def test_every_tick_is_published_once_while_workers_are_killed(chaos_node, tmp_path):
    run = uuid.uuid4().hex[:8]
    queue, exchange = f"sched-chaos-{run}", f"sched-chaos-{run}"
    env = {**os.environ, "SCHEDULE_CHAOS_QUEUE": queue, "SCHEDULE_CHAOS_EXCHANGE": exchange}
    env.pop("RABBITQ_URL", None)
    env["PYTHONUNBUFFERED"] = "1"
    connection = await aio_pika.connect(chaos_node.url)
    channel = await connection.channel()
    ex = await channel.declare_exchange(exchange, aio_pika.ExchangeType.TOPIC, durable=True)
    counted = await channel.declare_queue(f"{queue}.count", durable=True)
    await counted.bind(ex, "chaos.schedule.tick")
    logs = iter(tmp_path / f"worker-{n}.log" for n in range(10_000))
    procs = [Proc(chaos_node.url, env, next(logs)) for _ in range(3)]
    rng = random.Random(21)
    kills = rounds = 0
    raw: Counter[str] = Counter()
    lateness: list[float] = []

    async def count() -> None:  # every publish so far, by message_id
        while (message := await counted.get(no_ack=True, fail=False)) is not None:
            assert message.message_id is not None
            raw[message.message_id] += 1
            tick = datetime.fromisoformat(message.headers["rabbitq-tick"])  # type: ignore[arg-type]
            if message.timestamp is not None:
                lateness.append(plan.lateness(tick, message.timestamp))

    kill_times: list[datetime] = []
    try:
        start = time.monotonic()
        while time.monotonic() - start < 2 * DURATION:
            await count()
            first_tick = min(map(tick_of, raw), default=None)
            after_first = sum(1 for t in kill_times if first_tick and t > first_tick)
            if time.monotonic() - start >= DURATION and after_first >= MIN_ROUNDS:
                break
            await asyncio.sleep(rng.uniform(1.5, 3.0))
            for p in procs:  # each was started after the last kills: alive, or say why not
                assert_running(p.proc, p.log, "a schedule worker")
            leaders = [i for i, p in enumerate(procs) if p.leads()]
            if not leaders:
                continue  # a takeover in progress: try again next round
            others = [i for i in range(3) if i != leaders[0]]
            victims = [leaders[0], rng.choice(others)]
            kill_times.append(utc_second())
            for i in victims:
                procs[i].kill()
                kills += 1
            rounds += 1
            await asyncio.sleep(rng.uniform(0, 1.0))
            for i in victims:
                procs[i] = Proc(chaos_node.url, env, next(logs))
        end = utc_second()  # the kills are over: every tick due by now must come
        settle_until = time.monotonic() + SETTLE
        while time.monotonic() < settle_until:
            await count()
            if raw and max(map(tick_of, raw)) >= end:
                break
            await asyncio.sleep(0.5)
    finally:
        for p in procs:
            if p.proc.poll() is None:
                p.proc.send_signal(signal.SIGTERM)
        for p in procs:
            p.proc.wait(timeout=60)
    await count()

    ticks = sorted(map(tick_of, raw))
    first, last = ticks[0], ticks[-1]
    due = max(last, end)  # every tick from the first to the end of the kills, at least
    expected = {first + timedelta(seconds=n) for n in range(int((due - first).total_seconds()) + 1)}
    covered = sum(1 for t in kill_times if first < t <= end)
    duplicates = sum(n - 1 for n in raw.values())
    takeovers = sum(f.read_text(errors="replace").count(LEADING) for f in tmp_path.glob("*.log"))
    print(
        f"\nschedule chaos: {len(raw)} ticks over {(last - first).seconds + 1} s, "
        f"{sum(raw.values())} raw publishes, {duplicates} duplicate(s), "
        f"{len(expected - set(ticks))} missing; {kills} kill -9 in {rounds} rounds, "
        f"{takeovers} takeovers, {covered} rounds after the first tick; "
        f"{sum(1 for x in lateness if x >= 1)} published a second or "
        f"more after their time (AMQP timestamps: 1 s resolution)"
    )
    try:
        assert duplicates == 0, [m for m, n in raw.items() if n > 1]
        assert set(ticks) == expected, sorted(expected - set(ticks))
        assert covered >= MIN_ROUNDS and takeovers >= rounds  # the test's power
    finally:
        for name in (f"{queue}.count", f"{queue}.schedules"):
            await channel.queue_delete(name)
        await delete_app_objects(connection, App(queue=queue, exchange=exchange))
        await connection.close()
