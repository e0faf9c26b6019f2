"""``rabbitq schedule pause|resume`` against the real broker and a running scheduler: a
paused schedule publishes no tick, ``schedule list`` shows it paused, and resuming
publishes the next tick, not the ones missed meanwhile."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta

import orjson
from click.testing import CliRunner

from rabbitq import App
from rabbitq.cli import main
from rabbitq.schedule import ScheduleMetrics, pause
from rabbitq.schedule.runner import Scheduler
from tests.integration.schedule.test_runner import counted, every_second, receive, until

__all__ = ["counted"]  # the fixture, imported to be used here


def cli(app: App, *args: str) -> str:
    module = "tests.integration.schedule.pause_app"
    result = CliRunner().invoke(
        main, ["schedule", *args, f"{module}:app", "beat", "--url", app.url or ""]
    )
    assert result.exit_code == 0, result.output
    return result.output


async def test_a_paused_schedule_publishes_nothing_and_resumes_without_catching_up(
    counted, connection, monkeypatch
):
    app, queue = counted
    every_second(app)
    import tests.integration.schedule.pause_app as holder

    monkeypatch.setattr(holder, "app", app, raising=False)
    metrics = ScheduleMetrics()
    runner = Scheduler(app, metrics=metrics)
    task = asyncio.create_task(runner.run())
    try:
        await receive(queue, 2)  # it runs
        unknown = CliRunner().invoke(
            main, ["schedule", "pause", "tests.integration.schedule.pause_app:app", "nope"]
        )
        assert unknown.exit_code == 2 and "no schedule named 'nope'" in unknown.output
        out = await asyncio.to_thread(cli, app, "pause")
        assert "paused" in out
        paused_at = datetime.now(UTC)

        def skipped() -> float:
            return metrics.skipped.labels("beat", "paused")._value.get()

        await until(lambda: skipped() >= 3)  # three ticks fell while paused
        await asyncio.sleep(0.5)
        # what was queued before the pause took effect is drained; nothing after it
        late = []
        while (m := await queue.get(no_ack=True, fail=False)) is not None:
            late.append(orjson.loads(m.body)["at"])
        assert all(datetime.fromisoformat(t) <= paused_at + timedelta(seconds=1.5) for t in late)

        listed = await asyncio.to_thread(
            CliRunner().invoke,
            main,
            ["schedule", "list", "tests.integration.schedule.pause_app:app", "--json",
             "--url", app.url or ""],
        )  # fmt: skip
        row = orjson.loads(listed.output)["schedules"][0]
        assert row["paused"] is True and row["paused_since"] is not None

        assert "resumed" in await asyncio.to_thread(cli, app, "resume")
        resumed_at = datetime.now(UTC)
        (first,) = await receive(queue, 1)
        tick = datetime.fromisoformat(orjson.loads(first.body)["at"])
        assert tick >= resumed_at - timedelta(seconds=1.5), "a missed tick was caught up"
        again = await asyncio.to_thread(cli, app, "resume")
        assert again.startswith("schedule beat was not paused")
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        with contextlib.suppress(Exception):
            channel = await connection.channel()
            await channel.queue_delete(pause.paused_queue(app.queue, "beat"))
