"""RetryLater in a real worker: the tier it asked for, no attempt used up."""

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
    assert recorder.events == [("retried", Send.type_name(), "200ms")] * 3 + [
        ("succeeded", Send.type_name())
    ]
