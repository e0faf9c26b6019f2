"""A chord id used twice, and a chord published twice without an idempotency store
(issue 33, item 2), through a real broker, worker, Redis and PostgreSQL.

- A second, *different* workflow under an id already used is refused at publish with
  one error, and nothing of it is sent (before: its first members got the first chord's
  message ids and were acked as duplicates, its callback was never sent, silently).
- A chord published twice, whose members' handlers have no idempotency store and refuse
  their repeat, sends its callback or its ``on_failure``, never both (before: every
  repeat was dead-lettered and sent ``on_failure`` after the callback)."""

from __future__ import annotations

import asyncio
import os
import uuid

import pytest

from rabbitq import Message, PermanentError, RetryPolicy, Worker, chord
from rabbitq.effects import PostgresStore, RedisStore
from tests.helpers import REDIS_URL, Recorder, running, wait_for

pytestmark = [pytest.mark.broker]

PG_URL = os.environ.get("RABBITQ_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


class Capture(Message, type="test.wfids.capture"):
    order: str
    item: int


class Receipt(Message, type="test.wfids.receipt"):
    order: str


class Alert(Message, type="test.wfids.alert"):
    order: str


class Sends(Recorder):
    """Counts what the worker published, by type (callbacks, on_failure messages)."""

    def published(self, exchange: str, type_name: str) -> None:
        self.events.append(("published", type_name))

    def sends(self, type_name: str) -> int:
        return self.events.count(("published", type_name))

    def duplicate(self, queue: str, type_name: str) -> None:
        self.events.append(("duplicate", type_name))


def _store(kind: str, redis_prefix: str) -> PostgresStore | RedisStore:
    if kind == "postgres":
        return PostgresStore(PG_URL, prefix=f"t_{uuid.uuid4().hex[:8]}_", cleanup_interval=None)
    return RedisStore(REDIS_URL, key_prefix=redis_prefix)


@pytest.mark.parametrize("kind", ["redis", "postgres"])
async def test_a_different_chord_under_a_used_id_is_refused_at_publish_not_dropped(
    kind, make_app, redis_prefix
):
    store = _store(kind, redis_prefix)
    app = make_app(retry=RetryPolicy(delays=(0.2,)), idempotency=store, status=store)
    runs: list[tuple[str, int]] = []
    receipts: list[str] = []

    @app.handler(Capture)
    async def capture(msg: Capture) -> None:
        runs.append((msg.order, msg.item))

    @app.handler(Receipt)
    async def receipt(msg: Receipt) -> None:
        receipts.append(msg.order)

    chord_id = f"payment-{uuid.uuid4().hex[:8]}"
    first = chord([Capture(order="a", item=i) for i in range(3)], then=Receipt(order="a"),
                  id=chord_id)  # fmt: skip
    second = chord([Capture(order="b", item=i) for i in range(5)], then=Receipt(order="b"),
                   id=chord_id)  # fmt: skip
    hooks = Sends()
    refused: Exception | None = None
    async with running(Worker(app, hooks=hooks)):
        async with app.publisher() as pub:
            await pub.publish(first)
            await wait_for(lambda: receipts == ["a"], timeout=30)
            await pub.publish(first)  # the same chord again (a producer's retry): fine
            try:
                await pub.publish(second)
            except Exception as exc:  # which one: asserted below
                refused = exc
        await asyncio.sleep(1.5)  # what the second chord sent would run now
    b_runs = sorted(i for order, i in runs if order == "b")
    assert refused is not None, (
        f"the second chord was published: of its 5 members {len(b_runs)} ran ({b_runs}), "
        f"{hooks.events.count(('duplicate', Capture.type_name()))} acked as duplicates, "
        f"receipts {receipts}"
    )
    assert type(refused).__name__ == "WorkflowIdInUse", repr(refused)
    assert chord_id in str(refused) and "3 members" in str(refused), str(refused)
    assert b_runs == [] and receipts == ["a"]  # nothing of the second was sent


@pytest.mark.parametrize("kind", ["redis", "postgres"])
async def test_a_chord_published_twice_without_idempotency_sends_the_callback_or_on_failure(
    kind, make_app, redis_prefix
):
    store = _store(kind, redis_prefix)
    app = make_app(retry=RetryPolicy(delays=(0.2,)), status=store)  # no idempotency store
    captured: dict[int, int] = {}
    refused: list[int] = []
    sent: list[str] = []

    @app.handler(Capture)
    async def capture(msg: Capture) -> None:
        await asyncio.sleep(0.05)  # the two copies of a member overlap in the worker
        if msg.item in captured:
            refused.append(msg.item)
            raise PermanentError(f"item {msg.item} is already captured")
        captured[msg.item] = captured.get(msg.item, 0) + 1

    @app.handler(Receipt)
    async def receipt(msg: Receipt) -> None:
        sent.append("receipt")

    @app.handler(Alert)
    async def alert(msg: Alert) -> None:
        sent.append("alert")

    c = chord([Capture(order="c", item=i) for i in range(6)], then=Receipt(order="c"),
              on_failure=Alert(order="c"))  # fmt: skip
    hooks = Sends()
    async with running(Worker(app, hooks=hooks)):
        async with app.publisher() as pub:
            await pub.publish(c)
            await pub.publish(c)  # every member twice, with the same ids
        await wait_for(lambda: sent, timeout=30)
        await asyncio.sleep(2.0)  # every copy settled; a second message would come now
    assert sent == ["receipt"], (
        f"sent {sent}: {len(refused)} repeat(s) refused by the handler "
        f"({hooks.count('dead_lettered')} dead-lettered)"
    )
    assert hooks.sends(Receipt.type_name()) == 1 and hooks.sends(Alert.type_name()) == 0
    assert captured == dict.fromkeys(range(6), 1)  # each member's effect once
    assert hooks.count("dead_lettered") == 0
