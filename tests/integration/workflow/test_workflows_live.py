"""Chains, groups and chords through a real broker, worker, Redis and PostgreSQL."""

from __future__ import annotations

import asyncio
import os
import uuid

import pytest

from rabbitq import (
    ConfigurationError,
    Context,
    Message,
    PermanentError,
    RetryPolicy,
    Worker,
    chain,
    chord,
    dlq,
    group,
)
from rabbitq._amqp import headers as h
from rabbitq.effects import PostgresStore, RedisStore
from rabbitq.workflow import wire
from tests.helpers import REDIS_URL, Recorder, drain_queue, run_cli_async, running, wait_for

pytestmark = [pytest.mark.broker]

PG_URL = os.environ.get("RABBITQ_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


class Step(Message, type="test.wflive.step"):
    n: int


class Capture(Message, type="test.wflive.capture"):
    item: int
    fail_first: bool = False
    poison: bool = False


class Receipt(Message, type="test.wflive.receipt"):
    order: str


class Alert(Message, type="test.wflive.alert"):
    order: str


class Sends(Recorder):
    """Counts what the worker published, by type (follow-ups, next steps, callbacks)."""

    def published(self, exchange: str, type_name: str) -> None:
        self.events.append(("published", type_name))

    def sends(self, type_name: str) -> int:
        return self.events.count(("published", type_name))


def _store(kind: str, redis_prefix: str) -> PostgresStore | RedisStore:
    if kind == "postgres":
        return PostgresStore(PG_URL, prefix=f"t_{uuid.uuid4().hex[:8]}_", cleanup_interval=None)
    return RedisStore(REDIS_URL, key_prefix=redis_prefix)


async def test_a_chain_runs_in_order_stops_at_a_dead_letter_and_resumes_on_replay(
    make_app, broker_url, connection
):
    app = make_app(retry=RetryPolicy(delays=()))
    seen: list[int] = []
    broken = {3}

    @app.handler(Step)
    async def step(msg: Step, ctx: Context) -> None:
        assert ctx.headers[h.GROUP] == chain_id
        if msg.n in broken:
            raise OSError("step 3 is down")
        seen.append(msg.n)

    c = chain(*(Step(n=n) for n in range(1, 6)))
    chain_id = c.id
    recorder = Recorder()
    async with running(Worker(app, hooks=recorder)):
        async with app.publisher() as pub:
            assert await pub.publish(c) == c.id
        await wait_for(lambda: recorder.count("dead_lettered") == 1)
        await asyncio.sleep(0.3)
        assert seen == [1, 2]  # stopped at the dead letter
        [dead] = await drain_queue(connection, f"{app.queue}.dlq", ack=False)
        assert wire.chain_of(dead.headers) == [wire.step_of(Step(n=4)), wire.step_of(Step(n=5))]
        broken.clear()
        replayed = await run_cli_async("dlq", "replay", app.queue, url=broker_url)
        assert replayed.returncode == 0, replayed.stdout + replayed.stderr
        await wait_for(lambda: seen == [1, 2, 3, 4, 5])
        await asyncio.sleep(0.3)
    assert seen == [1, 2, 3, 4, 5]  # resumed from step 3, each step once


async def test_a_group_is_published_together_and_returns_its_id(make_app):
    app = make_app()
    got: dict[int, str] = {}

    @app.handler(Step)
    async def step(msg: Step, ctx: Context) -> None:
        got[msg.n] = ctx.headers[h.GROUP]

    g = group([Step(n=n) for n in range(20)])
    async with running(Worker(app)):
        async with app.publisher() as pub:
            assert await pub.publish(g) == g.id
        await wait_for(lambda: len(got) == 20)
    assert set(got.values()) == {g.id}


async def test_a_chord_needs_a_status_store_and_says_so(make_app):
    app = make_app()
    async with app.publisher() as pub:
        with pytest.raises(ConfigurationError, match=r"needs a status store.*App\(queue="):
            await pub.publish(chord([Step(n=1)], then=Receipt(order="o")))


@pytest.mark.parametrize("kind", ["redis", "postgres"])
async def test_a_chord_callback_goes_once_after_every_member_with_their_results(
    kind, make_app, redis_prefix
):
    store = _store(kind, redis_prefix)
    app = make_app(retry=RetryPolicy(delays=(0.2,)), idempotency=store, status=store)
    done: set[int] = set()
    failed_once: set[int] = set()
    receipts: list[tuple[str, list[object], set[int]]] = []

    @app.handler(Capture)
    async def capture(msg: Capture, ctx: Context) -> dict[str, int]:
        if msg.fail_first and msg.item not in failed_once:
            failed_once.add(msg.item)
            raise OSError("gateway down")
        done.add(msg.item)
        return {"item": msg.item, "cents": 100 * msg.item}

    @app.handler(Receipt)
    async def receipt(msg: Receipt, ctx: Context) -> None:
        assert ctx.headers[h.CALLBACK_OF] == c.id
        receipts.append((ctx.message_id, await ctx.chord_results(), set(done)))

    c = chord(
        [Capture(item=i, fail_first=i % 3 == 0) for i in range(8)], then=Receipt(order="o-1")
    )
    hooks = Sends()
    async with running(Worker(app, hooks=hooks)):
        async with app.publisher() as pub:
            await pub.publish(c)
            await pub.publish(c)  # every member twice: the same ids
        await wait_for(lambda: receipts, timeout=30)
        await asyncio.sleep(1.0)  # a second callback would come now
    assert len(receipts) == 1
    assert hooks.sends(Receipt.type_name()) == 1  # published once, not deduplicated later
    message_id, results, done_before = receipts[0]
    assert message_id == wire.callback_id(c.id)
    assert done_before == set(range(8))  # never before the last member succeeded
    assert results == [{"item": i, "cents": 100 * i} for i in range(8)]
    assert await app.result(wire.member_id(c.id, 3)) == {"item": 3, "cents": 300}
    assert await app.result(wire.callback_id(c.id)) is None  # returned nothing


@pytest.mark.parametrize("kind", ["redis"])
async def test_a_dead_lettered_member_sends_on_failure_once_and_its_replay_completes_it(
    kind, make_app, redis_prefix, broker_url
):
    store = _store(kind, redis_prefix)
    app = make_app(retry=RetryPolicy(delays=(0.2,)), idempotency=store, status=store)
    poisoned = True
    sent: list[str] = []

    @app.handler(Capture)
    async def capture(msg: Capture) -> None:
        if msg.poison and poisoned:
            raise PermanentError("card declined")

    @app.handler(Receipt)
    async def receipt(msg: Receipt) -> None:
        sent.append("receipt")

    @app.handler(Alert)
    async def alert(msg: Alert) -> None:
        sent.append("alert")

    c = chord(
        [Capture(item=i, poison=i in (1, 2)) for i in range(4)],
        then=Receipt(order="o-2"),
        on_failure=Alert(order="o-2"),
    )
    recorder = Sends()
    async with running(Worker(app, hooks=recorder)):
        async with app.publisher() as pub:
            await pub.publish(c)
        await wait_for(lambda: recorder.count("dead_lettered") == 2)
        await wait_for(lambda: sent == ["alert"])
        await asyncio.sleep(0.5)
        assert sent == ["alert"]  # once for two dead members; the chord waits
        poisoned = False
        assert (await dlq.replay(app.queue, url=broker_url)).done == 2
        await wait_for(lambda: sent == ["alert", "receipt"])
        await asyncio.sleep(0.5)
    assert sent == ["alert", "receipt"]
    assert recorder.sends(Alert.type_name()) == 1 and recorder.sends(Receipt.type_name()) == 1


async def test_a_workflow_takes_no_per_message_argument(make_app):
    app = make_app()
    async with app.publisher() as pub:
        with pytest.raises(ConfigurationError, match="takes no other argument"):
            await pub.publish(group([Step(n=1)]), delay=5)
