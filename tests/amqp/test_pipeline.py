"""publish_many's window (amqp.pipeline): one timer bounds a window's confirms, a
caller's cancellation leaves no publish of it running, and the publisher's plain path
fails the unanswered ones as publish() would, each with its hook."""

from __future__ import annotations

import asyncio

import pytest

from rabbitq import App, ConfigurationError, Message, PartialPublish, PublishInterrupted
from rabbitq._amqp import publisher as publisher_module
from rabbitq._amqp.pipeline import pipelined
from rabbitq.errors import PublishError
from rabbitq.hooks import Hooks


class Item(Message, type="unit.pipeline.item"):
    n: int


def _timed_out(item: int) -> PublishError:
    return PublishInterrupted(f"no confirm for {item}")


async def test_the_unanswered_of_a_window_fail_after_its_timeout_the_others_are_confirmed():
    started: list[str] = []

    async def send(item: int, mid: str) -> str:
        started.append(mid)
        if item % 3 == 0:
            await asyncio.Event().wait()  # never confirmed
        return mid

    with pytest.raises(PartialPublish) as caught:
        await pipelined(range(10), send, window=4, timeout=0.05, timed_out=_timed_out)
    failed = caught.value.failed
    assert [str(exc) for _, exc in failed] == [f"no confirm for {n}" for n in (0, 3, 6, 9)]
    assert [mid for mid, _ in failed] == [started[n] for n in (0, 3, 6, 9)]
    assert caught.value.confirmed == [started[n] for n in range(10) if n % 3]


async def test_a_window_that_is_all_answered_returns_the_ids_in_order():
    async def send(item: int, mid: str) -> str:
        await asyncio.sleep(0.001 * (5 - item % 5))  # answered out of order
        return mid

    ids = await pipelined(range(12), send, window=5, timeout=30, timed_out=_timed_out)
    assert len(ids) == len(set(ids)) == 12


async def test_a_cancelled_caller_leaves_no_publish_of_its_window_running():
    running: set[int] = set()

    async def send(item: int, mid: str) -> str:
        running.add(item)
        try:
            await asyncio.Event().wait()
        finally:
            running.discard(item)
        return mid

    task = asyncio.create_task(
        pipelined(range(6), send, window=6, timeout=30, timed_out=_timed_out)
    )
    while len(running) < 6:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert running == set()


class Counting(Hooks):
    def __init__(self) -> None:
        self.failed: list[tuple[str, str]] = []

    def publish_failed(self, exchange: str, type_name: str, kind: str) -> None:
        self.failed.append((type_name, kind))


class _Channel:
    is_closed = False


async def test_publish_many_without_a_confirm_fails_each_as_publish_would(monkeypatch):
    async def never_confirmed(*args: object) -> None:
        await asyncio.Event().wait()

    monkeypatch.setattr(publisher_module, "send_confirmed", never_confirmed)
    hooks = Counting()
    pub = App(queue="unit-pipeline").publisher(timeout=0.05, hooks=hooks)
    pub._channel = pub._exchange = _Channel()  # type: ignore[assignment]
    with pytest.raises(PartialPublish) as caught:
        await pub.publish_many([Item(n=n) for n in range(5)], window=2)
    assert caught.value.confirmed == []
    assert len(caught.value.failed) == 5
    for _, exc in caught.value.failed:
        assert isinstance(exc, PublishInterrupted)
        assert "no confirm within 0.05s" in str(exc)
    assert hooks.failed == [("unit.pipeline.item", "interrupted")] * 5


async def test_publish_many_s_plain_path_still_refuses_a_keyword_without_its_step():
    pub = App(queue="unit-pipeline").publisher()
    pub._channel = pub._exchange = _Channel()  # type: ignore[assignment]
    with pytest.raises(ConfigurationError, match="unique_for needs a store"):
        await pub.publish_many([Item(n=1)], unique_for=60, unique_key=lambda m: str(m.n))
