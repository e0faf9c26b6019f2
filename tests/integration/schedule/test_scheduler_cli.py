"""``rabbitq scheduler`` as a process: it leads, publishes, and on SIGTERM exits 0 and
gives the lease back."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap

import aio_pika

from rabbitq.schedule import plan

WAIT = 60.0


async def test_the_scheduler_command_publishes_and_stops_cleanly_on_sigterm(
    broker_url, connection, uid, tmp_path
):
    queue, exchange = f"t.{uid}.sched", f"t.{uid}.x"
    (tmp_path / f"sched_{uid}.py").write_text(
        textwrap.dedent(
            f"""
            from datetime import timedelta
            from rabbitq import App, Message

            class Ping(Message, type="test.scheduler-cli.ping"):
                n: int

            app = App(queue={queue!r}, exchange={exchange!r}, queue_type="classic")

            @app.schedule(every=timedelta(seconds=1))
            def ping(tick):
                return Ping(n=tick.second)
            """
        )
    )
    channel = await connection.channel()
    ex = await channel.declare_exchange(exchange, aio_pika.ExchangeType.TOPIC, durable=True)
    pings = await channel.declare_queue(f"{queue}.pings", durable=True)
    await pings.bind(ex, "test.scheduler-cli.ping")
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "RABBITQ_URL": broker_url}
    proc = subprocess.Popen(
        [sys.executable, "-m", "rabbitq", "scheduler", f"sched_{uid}:app"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        async with asyncio.timeout(WAIT):
            while (got := await pings.get(no_ack=True, fail=False)) is None:
                await asyncio.sleep(0.1)
        assert got.message_id is not None and got.message_id.startswith("tick:ping:")
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=WAIT)
        assert proc.returncode == 0, output
        assert "leading the schedules of" in output
        lease = await connection.channel()
        declared = await lease.declare_queue(plan.lease_queue(queue), exclusive=True)
        await declared.delete()  # free again: the lease went with the process
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for name in (f"{queue}.pings", plan.progress_queue(queue)):
            await channel.queue_delete(name)
        await channel.exchange_delete(exchange)
