"""The scheduler against the real broker: one leader among several, takeover, catch-up
from the progress record, a failing function, several messages per tick, and
``rabbitq schedule list``."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta

import aio_pika
import orjson
import pytest
from click.testing import CliRunner
from prometheus_client import CollectorRegistry

from rabbitq import App, Message
from rabbitq.cli import main
from rabbitq.schedule import ScheduleMetrics, plan
from rabbitq.schedule.runner import Scheduler, beside

WAIT = 30.0  # seconds any expected publish may take on a loaded machine


class Beat(Message, type="test.schedule.beat"):
    at: str


@pytest.fixture
async def counted(
    connection, make_app, uid
) -> AsyncIterator[tuple[App, aio_pika.abc.AbstractQueue]]:
    app = make_app(queue_type="classic")
    channel = await connection.channel()
    ex = await channel.declare_exchange(app.exchange, aio_pika.ExchangeType.TOPIC, durable=True)
    queue = await channel.declare_queue(f"t.{uid}.beats", durable=True)
    await queue.bind(ex, Beat.type_name())
    try:
        yield app, queue
    finally:
        for name in (plan.progress_queue(app.queue), queue.name):
            with contextlib.suppress(Exception):
                await channel.queue_delete(name)


async def receive(queue, count: int) -> list[aio_pika.abc.AbstractIncomingMessage]:
    got: list[aio_pika.abc.AbstractIncomingMessage] = []
    async with asyncio.timeout(WAIT):
        while len(got) < count:
            message = await queue.get(no_ack=True, fail=False)
            if message is None:
                await asyncio.sleep(0.1)
            else:
                got.append(message)
    return got


async def until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(WAIT):
        while not condition():
            await asyncio.sleep(0.05)


def every_second(app: App, catch_up: str = "all") -> None:
    @app.schedule(every=timedelta(seconds=1), catch_up=catch_up)  # type: ignore[arg-type]
    def beat(tick: datetime) -> Beat:
        return Beat(at=tick.isoformat())


def seconds(ids: list[str]) -> list[datetime]:
    return sorted(datetime.strptime(i.split(":")[2], "%Y%m%dT%H%M%SZ") for i in ids)


def consecutive(ticks: list[datetime]) -> bool:
    return all(b - a == timedelta(seconds=1) for a, b in zip(ticks, ticks[1:], strict=False))


async def test_one_of_two_schedulers_leads_and_the_other_takes_over(counted):
    app, queue = counted
    every_second(app)
    registry = CollectorRegistry()
    first, second = Scheduler(app, metrics=ScheduleMetrics(registry)), Scheduler(app)
    tasks = {first: asyncio.create_task(first.run()), second: asyncio.create_task(second.run())}
    try:
        await until(lambda: first.leading or second.leading)
        leader = first if first.leading else second
        other = second if leader is first else first
        before = await receive(queue, 2)
        assert not other.leading
        tasks[leader].cancel()
        await until(lambda: other.leading)
        after = await receive(queue, 2)
    finally:
        for task in tasks.values():
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)
    while (m := await queue.get(no_ack=True, fail=False)) is not None:
        after.append(m)
    ids = [m.message_id for m in before + after]
    assert len(ids) == len(set(ids))
    assert consecutive(seconds(ids))  # nothing lost across the takeover
    assert all(m.headers["rabbitq-schedule"] == "beat" for m in before + after)
    assert registry.get_sample_value("rabbitq_schedule_takeovers_total") >= 1


async def test_a_new_leader_publishes_the_ticks_missed_since_the_record(counted, connection):
    app, queue = counted
    every_second(app, catch_up="all")
    last = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=10)
    channel = await connection.channel()
    await channel.declare_queue(
        plan.progress_queue(app.queue), durable=True, arguments=plan.progress_arguments("classic")
    )
    record = plan.encode_progress(
        plan.Progress(ticks={"beat": last}, leader="gone:1", written=last)
    )
    await channel.default_exchange.publish(aio_pika.Message(record), plan.progress_queue(app.queue))
    scheduler = Scheduler(app)
    task = asyncio.create_task(scheduler.run())
    try:
        got = await receive(queue, 11)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    ticks = seconds([m.message_id for m in got])
    assert ticks[0] == (last + timedelta(seconds=1)).replace(tzinfo=None)
    assert consecutive(ticks)


async def test_a_failing_function_skips_its_tick_and_the_next_ones_come(counted):
    app, queue = counted
    calls: list[datetime] = []
    registry = CollectorRegistry()

    @app.schedule(every=timedelta(seconds=1))
    async def beat(tick: datetime) -> list[Beat]:
        calls.append(tick)
        if len(calls) == 1:
            raise RuntimeError("first tick fails")
        return [Beat(at="a"), Beat(at="b")]

    task = asyncio.create_task(Scheduler(app, metrics=ScheduleMetrics(registry)).run())
    try:
        got = await receive(queue, 2)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    base = got[0].message_id
    assert [m.message_id for m in got] == [base, f"{base}.1"]
    assert [orjson.loads(m.body)["at"] for m in got] == ["a", "b"]
    assert (
        registry.get_sample_value(
            "rabbitq_schedule_ticks_skipped_total", {"schedule": "beat", "reason": "error"}
        )
        == 1
    )
    assert seconds([base])[0] > calls[0].replace(tzinfo=None)


async def test_schedule_list_shows_the_last_tick_the_next_and_the_leader(counted, monkeypatch):
    app, queue = counted
    every_second(app)
    import sys
    import types

    module = types.ModuleType("schedule_list_app")
    module.app = app  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "schedule_list_app", module)
    scheduler = Scheduler(app)

    async def listed() -> dict:
        result = await asyncio.to_thread(
            CliRunner().invoke, main, ["schedule", "list", "schedule_list_app:app", "--json"]
        )
        assert result.exit_code == 0, result.output
        return orjson.loads(result.output)

    task = asyncio.create_task(beside(asyncio.sleep(3600), scheduler))
    try:
        await receive(queue, 1)
        shown = await listed()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    row = shown["schedules"][0]
    assert (row["name"], row["when"], row["catch_up"]) == ("beat", "every 1s", "all")
    assert row["last_tick"] is not None and row["next_tick"] > row["last_tick"]
    assert shown["leading"] is True and shown["leader"] == scheduler.name
    assert (await listed())["leading"] is False  # its lease went with its connection
