"""A CancelledError that aiormq causes (a future it cancelled) is not the caller's."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from rabbitq import PublishInterrupted
from rabbitq._amqp import failover
from rabbitq._amqp.cancel import cancelled_by_caller
from rabbitq._amqp.confirm import send_confirmed
from rabbitq._amqp.properties import new
from rabbitq.message import Message


class Note(Message, type="unit.cancel.note"):
    text: str


class Underlay:
    """An aiormq channel whose confirm future is cancelled (its connection closed)."""

    def __init__(self, confirm: asyncio.Future[None]) -> None:
        self.confirm = confirm

    async def basic_publish(self, body: bytes, **kwargs: Any) -> None:
        await self.confirm


class Channel:
    is_closed = False

    def __init__(self, underlay: Underlay) -> None:
        self.underlay = underlay

    async def get_underlay_channel(self) -> Underlay:
        return self.underlay


async def test_a_future_cancelled_by_someone_else_is_not_the_callers_cancellation() -> None:
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    future.cancel()
    with pytest.raises(asyncio.CancelledError):
        await future
    assert not cancelled_by_caller()


async def test_a_confirm_cancelled_by_a_closing_connection_is_a_publish_interrupted() -> None:
    confirm: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_later(0.01, confirm.cancel)
    props = new(Note(text="x"), message_id="m1")
    channel: Any = Channel(Underlay(confirm))
    with pytest.raises(PublishInterrupted, match="may or may not have been stored"):
        await send_confirmed(channel, "x", "unit.cancel.note", b"{}", props)


async def test_the_callers_own_cancellation_is_passed_on() -> None:
    confirm: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    props = new(Note(text="x"), message_id="m2")
    channel: Any = Channel(Underlay(confirm))
    task = asyncio.create_task(send_confirmed(channel, "x", "unit.cancel.note", b"{}", props))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # and a timeout still times out (asyncio.timeout cancels the task)
    channel = Channel(Underlay(asyncio.get_running_loop().create_future()))
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.01):
            await send_confirmed(channel, "x", "unit.cancel.note", b"{}", props)


async def test_a_connection_attempt_cut_by_aiormq_is_a_failed_attempt(monkeypatch) -> None:
    closed: list[bool] = []

    async def connect(self: object, timeout: float) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        future.cancel()
        await future

    async def close(self: object, exc: object = None) -> None:
        closed.append(True)

    monkeypatch.setattr(failover.FailoverConnection, "connect", connect)
    monkeypatch.setattr(failover.FailoverConnection, "close", close)
    with pytest.raises(ConnectionError, match="closed while opening"):
        await failover.connect_robust(["amqp://127.0.0.1:1/"], timeout=1)
    assert closed == [True]
