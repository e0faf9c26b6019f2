"""RetryLater in a real worker: the delay it asked for, in the delay ladder, back to its
queue only, no attempt used up."""

from __future__ import annotations

import pytest

from rabbitq import Context, Message, RetryLater, RetryPolicy, Worker
from tests.helpers import Recorder, running, wait_for

pytestmark = [pytest.mark.broker]


class Send(Message, type="test.retry_later.send"):
    n: int


async def test_a_handler_told_to_wait_comes_back_without_using_an_attempt(make_app):
    # One tier only: an ordinary failure on the second attempt would be dead-lettered.
    app = make_app(retry=RetryPolicy(delays=(0.2,)))
    attempts: list[int] = []

    @app.handler(Send)
    async def send(msg: Send, ctx: Context) -> None:
        attempts.append(ctx.attempt)
        if len(attempts) <= 3:
            raise RetryLater(0.1)  # three 429s in a row

    recorder = Recorder()
    async with running(Worker(app, hooks=recorder)):
        async with app.publisher() as pub:
            await pub.publish(Send(n=1))
        await wait_for(lambda: recorder.count("succeeded") == 1, timeout=30)
    assert attempts == [1, 1, 1, 1]
    assert recorder.events == [("retried", Send.type_name(), "ladder")] * 3 + [
        ("succeeded", Send.type_name())
    ]


async def test_a_wait_asked_for_is_held_in_the_ladder_and_comes_back_to_the_failed_queue_only(
    make_app, connection
):
    from datetime import UTC, datetime

    from tests.helpers import declare_topology, queue_depth

    app = make_app(retry=RetryPolicy(delays=(60,)))  # a tier far longer than the wait
    other = make_app()  # bound to the same type on the same exchange
    seen: list[tuple[int, datetime, object]] = []

    @app.handler(Send)
    async def send(msg: Send, ctx: Context) -> None:
        seen.append((ctx.attempt, datetime.now(UTC), ctx.headers.get("rabbitq-due")))
        if len(seen) == 1:
            raise RetryLater(1.3)

    @other.handler(Send)
    async def other_send(msg: Send) -> None: ...

    await declare_topology(connection, other)
    async with running(Worker(app)):
        async with app.publisher() as pub:
            await pub.publish(Send(n=1))
        await wait_for(lambda: len(seen) == 2, timeout=30)
    (_, first, _), (attempt, second, due) = seen
    assert attempt == 1 and isinstance(due, str)
    assert second >= datetime.fromisoformat(due) and (second - first).total_seconds() >= 1.3
    assert await queue_depth(connection, other.queue) == 1  # its own copy, once; no retry
