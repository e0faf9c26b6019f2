"""send_follow_ups: a broker that never confirms (it blocks publishers under a resource
alarm) fails the attempt at the deadline instead of holding the handler's slot."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from rabbitq import Message
from rabbitq.effects.followups import make_follow_up
from rabbitq.effects.sender import send_follow_ups
from rabbitq.errors import PublishError


class Captured(Message, type="t.sender.captured"):
    n: int


class Blocked:
    """A publisher whose publishes are never confirmed (a blocked connection)."""

    def __init__(self) -> None:
        self.published: list[dict[str, Any]] = []

    async def publish(self, message: Message, **options: Any) -> str:
        self.published.append({"message": message, **options})
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


async def test_follow_ups_not_confirmed_within_the_deadline_raise_a_publish_error() -> None:
    publisher = Blocked()
    follow_ups = [
        make_follow_up(
            Captured(n=n), incoming_id="m1", incoming_correlation=None, origin="m1", position=n
        )
        for n in range(2)
    ]
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(PublishError, match="2 follow-up.s. not confirmed within 0.2s"):
        await send_follow_ups(publisher.publish, follow_ups, deadline=0.2)
    assert len(publisher.published) == 2  # both were in flight at once
    assert loop.time() - started < 2


async def test_each_follow_up_is_published_with_its_ids_headers_and_options() -> None:
    publisher = Blocked()
    f = make_follow_up(
        Captured(n=1), incoming_id="m1", incoming_correlation="c1", origin="m1", position=1,
        headers={"h": "v"}, options={"priority": 2, "delay": 1.5},
    )  # fmt: skip
    with pytest.raises(PublishError):
        await send_follow_ups(publisher.publish, [f], deadline=0.1)
    assert publisher.published == [
        {
            "message": Captured(n=1),
            "message_id": f.message_id,
            "correlation_id": "c1",
            "headers": {"h": "v", "rabbitq-causation-id": "m1"},
            "priority": 2,
            "delay": 1.5,
        }
    ]
