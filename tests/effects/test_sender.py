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
from rabbitq.hooks import Hooks


class Captured(Message, type="t.sender.captured"):
    n: int


class Blocked:
    """A channel whose publishes are never confirmed (a blocked connection)."""

    is_closed = False

    def __init__(self) -> None:
        self.published = 0

    async def get_underlay_channel(self) -> Any:
        return self

    async def basic_publish(self, *args: Any, **kwargs: Any) -> None:
        self.published += 1
        await asyncio.Event().wait()


async def test_follow_ups_not_confirmed_within_the_deadline_raise_a_publish_error() -> None:
    channel = Blocked()
    follow_ups = [
        make_follow_up(
            Captured(n=n), incoming_id="m1", incoming_correlation=None, origin="m1", position=n
        )
        for n in range(2)
    ]
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(PublishError, match="2 follow-up.s. not confirmed within 0.2s"):
        await send_follow_ups(channel, "x", follow_ups, Hooks(), deadline=0.2)  # type: ignore[arg-type]
    assert channel.published == 2  # both were in flight at once
    assert loop.time() - started < 2
