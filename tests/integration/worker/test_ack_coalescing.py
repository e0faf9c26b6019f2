"""Coalesced acks keep every guarantee: a mix of successes, retries, dead letters, poison
input and handlers finishing out of order ends exactly accounted; a shutdown mid-run
acks what finished and returns what did not."""

from __future__ import annotations

import asyncio
import random
from collections import Counter

import pytest

from rabbitq import Context, Message, PermanentError, RetryPolicy, Worker
from rabbitq._worker.acks import Acker
from tests.helpers import (
    Recorder,
    declare_topology,
    drain_queue,
    publish_bare,
    queue_depth,
    running,
    wait_for,
)


class Item(Message, type="test.coalesce.item"):
    n: int


@pytest.fixture
def ack_frames(monkeypatch):
    """How many deliveries each ack frame the worker wrote covered."""
    sizes: list[int] = []
    send = Acker._send

    async def spy(self, tag, multiple, tags):
        sizes.append(len(tags))
        await send(self, tag, multiple, tags)

    monkeypatch.setattr(Acker, "_send", spy)
    return sizes


async def test_a_mix_of_outcomes_with_coalesced_acks_ends_exactly_accounted(
    make_app, connection, broker_url, ack_frames
):
    total = 600
    app = make_app(retry=RetryPolicy(delays=(0.2,)), prefetch=64)
    calls: Counter[tuple[int, int]] = Counter()
    successes: Counter[int] = Counter()
    rng = random.Random(11)
    pauses = {n: rng.choice([0, 0, 0, 0.001, 0.005, 0.02]) for n in range(total)}

    @app.handler(Item)
    async def item(msg: Item, ctx: Context) -> None:
        calls[(msg.n, ctx.attempt)] += 1
        await asyncio.sleep(pauses[msg.n])  # handlers finish out of order
        if msg.n % 5 == 0:
            raise PermanentError("never")  # dead-lettered at once
        if msg.n % 5 == 1 and ctx.attempt == 1:
            raise RuntimeError("once")  # retried, then succeeds
        if msg.n % 5 == 2:
            raise RuntimeError("always")  # retried, then exhausted
        successes[msg.n] += 1

    poison = 20
    rec = Recorder()
    topology = app.topology()
    await declare_topology(connection, app)
    for _ in range(poison):  # undecodable bodies: dead-lettered as invalid
        await publish_bare(
            broker_url, app.exchange, Item.type_name(), b"{not json", type=Item.type_name()
        )
    async with running(Worker(app, hooks=rec)):
        async with app.publisher() as pub:
            await pub.publish_many(Item(n=n) for n in range(total))
        await wait_for(
            lambda: rec.count("succeeded") + rec.count("dead_lettered") >= total + poison,
            timeout=60,
        )

    for spec in (topology.main, *topology.retries):
        assert await queue_depth(connection, spec.name) == 0, f"{spec.name} is not empty"
    dead = await drain_queue(connection, topology.dlq.name)
    reasons = Counter(m.headers["rabbitq-reason"] for m in dead)
    expected_success = {n for n in range(total) if n % 5 in (1, 3, 4)}
    assert set(successes) == expected_success
    assert all(k == 1 for k in successes.values()), "a message succeeded twice"
    assert all(k == 1 for k in calls.values()), "an attempt ran twice (a lost ack)"
    assert reasons == {"permanent": total // 5, "exhausted": total // 5, "invalid": poison}
    assert rec.count("succeeded") == len(expected_success)
    assert rec.count("retried") == 2 * total // 5
    assert rec.count("requeued") == 0
    # coalescing was on: some ack frames covered several deliveries
    assert sum(ack_frames) == total + poison + 2 * total // 5
    assert max(ack_frames) > 1


class Job(Message, type="test.coalesce.job"):
    n: int
    slow: bool


async def test_a_shutdown_mid_run_acks_what_finished_and_returns_what_did_not(make_app, connection):
    app = make_app(prefetch=20)
    done: list[int] = []
    started: list[int] = []
    fast = 200
    worker: Worker | None = None

    @app.handler(Job)
    async def job(msg: Job) -> None:
        started.append(msg.n)
        if msg.slow:
            await asyncio.sleep(60)  # still running when the grace period ends
        done.append(msg.n)
        if len(done) == fast:
            assert worker is not None
            worker.stop()  # its own ack and the last batch are still waiting to be sent

    rec = Recorder()
    worker = Worker(app, hooks=rec, grace_period=0.5)
    await declare_topology(connection, app)
    async with app.publisher() as pub:
        # The slow ones come first: every fast one finishes above a gap of slow tags.
        await pub.publish_many([Job(n=n, slow=True) for n in range(5)])
        await pub.publish_many([Job(n=n, slow=False) for n in range(5, 5 + fast)])
    task = asyncio.create_task(worker.run())
    await asyncio.wait_for(task, timeout=60)

    assert sorted(done) == list(range(5, 5 + fast))
    assert rec.count("succeeded") == fast
    assert rec.count("requeued") == 5
    back = await drain_queue(connection, app.queue)
    assert sorted(Job.model_validate_json(m.body).n for m in back) == list(range(5))
    assert all(m.redelivered for m in back)


async def test_acks_still_waiting_to_be_coalesced_are_sent_before_the_worker_closes(
    make_app, connection, monkeypatch
):
    # Hold acks back far longer than the shutdown takes: only the final flush sends them.
    monkeypatch.setattr("rabbitq._worker.acks.DELAY", 30.0)
    monkeypatch.setattr("rabbitq._worker.acks.MAX_WAIT", 30.0)
    app = make_app(prefetch=256)
    total = 50  # under the batch size (64): nothing is sent before the flush
    done: list[int] = []
    worker: Worker | None = None

    @app.handler(Job)
    async def job(msg: Job) -> None:
        done.append(msg.n)
        if len(done) == total:
            assert worker is not None
            worker.stop()  # the last batch of acks has not been sent yet

    rec = Recorder()
    worker = Worker(app, hooks=rec, grace_period=5)
    await declare_topology(connection, app)
    async with app.publisher() as pub:
        await pub.publish_many([Job(n=n, slow=False) for n in range(total)])
    await asyncio.wait_for(worker.run(), timeout=60)

    assert sorted(done) == list(range(total))
    assert rec.count("succeeded") == total
    assert rec.count("requeued") == 0
    assert await queue_depth(connection, app.queue) == 0
