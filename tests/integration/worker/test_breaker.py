"""The circuit breaker against a real broker: a handler's dependency goes down and comes
back. With the breaker the worker pauses instead of burning every message's retries,
so fewer messages reach the DLQ than without it, and none is lost."""

from __future__ import annotations

import asyncio
import logging

import pytest

from rabbitq import Breaker, Context, Message, RetryPolicy, Worker
from tests.helpers import Recorder, drain_queue, running, wait_for

pytestmark = pytest.mark.broker

COUNT = 40
DOWN_FOR = 2.0  # seconds from the first failure until the dependency is back


class Email(Message, type="test.breaker.email"):
    n: int


class States(Recorder):
    def __init__(self) -> None:
        super().__init__()
        self.states: list[str] = []

    def breaker_changed(self, queue: str, state: str) -> None:
        self.states.append(state)

    def received(self, queue: str, type_name: str) -> None:
        self.events.append(("received", queue, type_name))


async def outage(make_app, connection, breaker: Breaker | None):
    """Publish COUNT emails while the provider is down, bring it back after DOWN_FOR s,
    and return (ids published, ids handled, ids dead-lettered, breaker states)."""
    app = make_app(retry=RetryPolicy(delays=(0.05, 0.05)), prefetch=8, breaker=breaker)
    provider_up = False
    first_failure = asyncio.Event()
    handled: list[str] = []

    @app.handler(Email)
    async def send(msg: Email, ctx: Context) -> None:
        await asyncio.sleep(0.005)
        if not provider_up:
            first_failure.set()
            raise ConnectionError("SMTP provider unreachable")
        handled.append(ctx.message_id)

    hooks = States()
    async with running(Worker(app, hooks=hooks, grace_period=5)) as worker:
        async with app.publisher() as pub:
            ids = await pub.publish_many([Email(n=i) for i in range(COUNT)])
        await first_failure.wait()
        await asyncio.sleep(DOWN_FOR)
        provider_up = True
        settled = lambda: len(set(handled)) + hooks.count("dead_lettered") >= COUNT  # noqa: E731
        await wait_for(settled, timeout=60)
        if worker.breakers is not None:
            await wait_for(lambda: worker.breakers.state == "closed", timeout=10)
    dead = [m.message_id for m in await drain_queue(connection, app.topology().dlq.name)]
    return ids, handled, dead, hooks.states


async def test_with_a_breaker_an_outage_dead_letters_fewer_messages_and_loses_none(
    make_app, connection, caplog
):
    caplog.set_level(logging.INFO, logger="rabbitq.breaker")
    breaker = Breaker(failure_ratio=0.5, window=10, min_calls=5, cooldown=0.4, probes=2)

    ids, handled, dead_with, states = await outage(make_app, connection, breaker)
    assert set(handled) | set(dead_with) == set(ids), "a message was lost"
    assert states[0] == "open" and "half-open" in states and states[-1] == "closed"
    assert any("closed -> open" in r.getMessage() for r in caplog.records)

    ids, handled, dead_without, _ = await outage(make_app, connection, None)
    assert set(handled) | set(dead_without) == set(ids), "a message was lost"

    print(
        f"dead letters over a {DOWN_FOR:g}s outage of {COUNT} messages: "
        f"{len(dead_with)} with the breaker, {len(dead_without)} without"
    )
    assert len(dead_with) < len(dead_without)
    assert len(dead_with) <= COUNT // 4


async def test_a_worker_stopped_while_its_breaker_is_open_returns_every_message(
    make_app, connection
):
    app = make_app(
        retry=RetryPolicy(delays=(30,)),
        prefetch=4,
        breaker=Breaker(window=2, min_calls=2, cooldown=60),
    )

    @app.handler(Email)
    async def send(msg: Email) -> None:
        raise ConnectionError("down")

    hooks = States()
    worker = Worker(app, hooks=hooks, grace_period=5)
    async with running(worker):
        async with app.publisher() as pub:
            await pub.publish_many([Email(n=i) for i in range(10)])
        await wait_for(lambda: hooks.states == ["open"])
        # every delivery the worker received before the breaker paused it is settled (as
        # many as the prefetch, or fewer on a slow machine where the pause came first)
        await wait_for(
            lambda: hooks.count("retried") + hooks.count("requeued") == hooks.count("received")
        )
    retried = hooks.count("retried")
    assert hooks.count("dead_lettered") == 0
    # nothing was acked that was not copied: the rest wait in the main queue
    main = await drain_queue(connection, app.queue)
    retry = await drain_queue(connection, app.topology().retry_queue(30_000).name)
    assert len(main) + len(retry) == 10
    assert len(retry) == retried
