"""The guard around rabbitq._worker.delivery.deliver_directly, which reads a delivery's
frames as aiormq 7's Channel does and calls the worker without aiormq's task.

If an aiormq release changes how its reader dispatches a delivery, the first test fails:
read the new code, bring deliver_directly in line with it.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

from aiormq.channel import Channel

from rabbitq._worker.delivery import deliver_directly


def test_aiormq_reads_a_delivery_the_way_deliver_directly_replaces():
    reader = inspect.getsource(Channel._reader)
    assert "await self._on_deliver_frame(frame)" in reader
    own = inspect.getsource(Channel._on_deliver_frame)
    assert "self.__get_content_header()" in own
    assert "self._read_content(frame, header)" in own
    assert "self.create_task(consumer(message))" in own


class FakeChannel:
    """What deliver_directly touches on an aiormq channel."""

    def __init__(self) -> None:
        self.by_aiormq: list[Any] = []

    async def _Channel__get_content_header(self) -> str:
        return "header"

    async def _read_content(self, frame: Any, header: str) -> tuple[Any, str]:
        return (frame.consumer_tag, header)

    async def _on_deliver_frame(self, frame: Any) -> None:
        self.by_aiormq.append(frame.consumer_tag)


class Frame:
    def __init__(self, tag: str) -> None:
        self.consumer_tag = tag


async def test_our_consumer_is_called_in_place_and_others_keep_aiormqs_way():
    channel = FakeChannel()
    seen: list[Any] = []
    assert deliver_directly(channel, "ours", seen.append)
    assert deliver_directly(channel, "ours-again", seen.append)  # installed once
    await channel._on_deliver_frame(Frame("ours"))
    await channel._on_deliver_frame(Frame("theirs"))
    await channel._on_deliver_frame(Frame("ours-again"))
    assert seen == [("ours", "header"), ("ours-again", "header")]
    assert channel.by_aiormq == ["theirs"]
    assert asyncio.get_running_loop()  # no task was needed: all ran in this one


async def test_a_failing_callback_is_logged_and_the_reader_goes_on(caplog):
    channel = FakeChannel()

    def boom(message: Any) -> None:
        raise RuntimeError("boom")

    deliver_directly(channel, "ours", boom)
    await channel._on_deliver_frame(Frame("ours"))
    assert "consumer callback failed" in caplog.text


def test_a_channel_without_those_methods_keeps_aiormqs_way():
    assert not deliver_directly(object(), "ours", print)


async def test_the_route_exists_before_the_consume_is_sent():
    # A delivery can follow consume-ok in the same read: routed only after consume-ok,
    # the first deliveries ran in aiormq's tasks and the next ones overtook them (an
    # ordered handler's key ran out of order, tests/chaos/test_ordering_proof.py).
    from types import SimpleNamespace

    from rabbitq._worker.consumer import Consumer
    from rabbitq.hooks import Hooks

    underlay = FakeChannel()
    routed_at_consume: list[bool] = []

    async def basic_consume(queue: str, callback: Any, **kwargs: Any) -> Any:
        routes = getattr(underlay, "_rabbitq_direct", {})
        routed_at_consume.append(kwargs["consumer_tag"] in routes)
        return SimpleNamespace(consumer_tag=kwargs["consumer_tag"])

    underlay.basic_consume = basic_consume  # type: ignore[attr-defined]
    underlay.on_consumer_cancel_callbacks = set()  # type: ignore[attr-defined]

    async def get_underlay_channel() -> Any:
        return underlay

    async def redeclare(_queue: str) -> None:
        return None

    consumer = Consumer("q", lambda message: None, Hooks(), redeclare=redeclare)
    consumer.channel = SimpleNamespace(get_underlay_channel=get_underlay_channel)  # type: ignore[assignment]
    await consumer._consume()
    assert routed_at_consume == [True]
