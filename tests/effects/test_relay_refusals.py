"""The relay says a refused row once, then sums up (issue 25, item 2): before, a row no
queue was bound to gave a warning on every poll (150 lines in 30 s)."""

from __future__ import annotations

import asyncio
import logging

from rabbitq import App, Message
from rabbitq.effects.refusals import RefusalLog
from rabbitq.effects.relay import Relay
from rabbitq.errors import PublishNacked, Unroutable

from ..helpers import wait_for


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def messages(caplog, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == level]


def test_a_refusal_is_said_once_then_summed_up_once_a_minute(caplog):
    clock = Clock()
    refusals = RefusalLog(logging.getLogger("t.refusals"), clock=clock)
    caplog.set_level(logging.INFO, logger="t.refusals")
    unroutable = Unroutable("no queue is bound to exchange 'x' with routing key 'k'")

    for i in range(300):  # 5 a second for a minute
        clock.now = i * 0.2
        refusals.refused("x", "k", 7, unroutable)
    said = messages(caplog, logging.WARNING)
    assert len(said) == 1
    assert said[0].startswith("outbox row 7 not published: no queue is bound")
    assert "until a queue is bound to 'k'" in said[0]

    clock.now = 60.0
    refusals.refused("x", "k", 7, unroutable)
    said = messages(caplog, logging.WARNING)
    assert len(said) == 2 and "300 more attempt(s) refused in the last 60 s" in said[1]

    clock.now = 61.0
    refusals.refused("x", "other", 8, PublishNacked("nacked"))  # another key: said at once
    refusals.published("x", "k")
    assert len(messages(caplog, logging.WARNING)) == 3
    (back,) = messages(caplog, logging.INFO)
    assert "published again" in back and "301 attempt(s)" in back

    refusals.refused("x", "k", 9, unroutable)  # a new episode is said at once again
    assert len(messages(caplog, logging.WARNING)) == 4


class Lost(Message, type="refusals.nobody.listens"):
    n: int


async def test_the_relay_warns_once_about_a_row_nobody_is_bound_to(
    make_outbox, pg, uid, broker_url, connection, caplog
):
    app = App(queue=f"t.{uid}.unused", exchange=f"t.{uid}.x", url=broker_url)
    channel = await connection.channel()
    exchange = await channel.declare_exchange(app.exchange, "topic", durable=True)
    outbox = make_outbox(app, poll_interval=0.02)
    async with pg.transaction():
        await outbox.publish(pg, Lost(n=1))
    caplog.set_level(logging.INFO, logger="rabbitq.outbox")
    attempts: list[int] = []
    relay = Relay(outbox, on_batch=attempts.append)
    task = asyncio.create_task(relay.run())
    try:
        await wait_for(lambda: len(attempts) >= 20, timeout=30)  # 20 refused attempts
    finally:
        relay.stop()
        await task
        await exchange.delete()
        await channel.close()
    refused = [m for m in messages(caplog, logging.WARNING) if "not published" in m]
    assert len(refused) == 1, refused
    assert "refusals.nobody.listens" in refused[0] or "routing key" in refused[0]
