"""Proof: the status of 1,000 messages through success, a retry, a dead letter and a
replay matches what happened, with the status store cut for 5 s in the middle.

The store is a PRIVATE redis-server (tests/redis_node.py, with an AOF fsynced on every
write, so that what it answered survives the kill), killed after the first 400 messages
and started again 5 s later, while the other 600 are published and handled. Counted,
never timed:

- every message settles as planned (the worker's own hooks: 1,000 succeeded, 300
  retried, 100 dead-lettered then replayed, none requeued; the queues end empty);
- each message's history in the store is its planned life with records missing only:
  never one too many, never out of order;
- every record is counted written or lost
  (``rabbitq_status_records_total{outcome="failed"|"dropped"}``); each missing record is
  among those counted lost (a write the store applied while the kill cut off its answer
  is counted lost yet present), and each outage was logged once when it began and once
  when it ended, with a count: the counts add up to the records counted lost;
- the final states read back, and the messages whose history has a gap, are reported.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import Counter
from collections.abc import Iterator

import pytest

from rabbitq import Context, Message, RetryPolicy, Worker, dlq
from rabbitq.status import RedisStatus
from tests.helpers import Recorder, queue_depth, running, wait_for
from tests.redis_node import RedisNode

pytestmark = [pytest.mark.broker, pytest.mark.slow]

N = 1000
OK = ["published", "received", "started", "succeeded"]
FLAKY = ["published", "received", "started", "retrying", "received", "started", "succeeded"]
DOOMED = [
    "published", "received", "started", "retrying", "received", "started", "dead_lettered",
    "replayed", "received", "started", "succeeded",
]  # fmt: skip


class Step(Message, type="test.status.step"):
    n: int


def plan(n: int) -> list[str]:
    """70% succeed at once, 20% after one retry, 10% are dead-lettered, then replayed."""
    return FLAKY if n % 10 in (7, 8) else DOOMED if n % 10 == 9 else OK


def is_subsequence(part: list[str], whole: list[str]) -> bool:
    it = iter(whole)
    return all(any(x == y for y in it) for x in part)


@pytest.fixture
def node() -> Iterator[RedisNode]:
    with RedisNode.started(persist=True) as started:
        yield started


async def test_the_status_of_1000_messages_survives_a_store_outage_counted(
    node, make_app, broker_url, connection, caplog
):
    app = make_app(
        retry=RetryPolicy(delays=(0.3,)), prefetch=64, status=RedisStatus(node.url, timeout=1.0)
    )
    replaying = False
    calls: Counter[int] = Counter()

    @app.handler(Step)
    async def step(msg: Step, ctx: Context) -> None:
        calls[msg.n] += 1
        kind = plan(msg.n)
        if kind is FLAKY and ctx.attempt == 1:
            raise OSError("flaky")
        if kind is DOOMED and not replaying:
            raise OSError("down until replayed")

    recorder = Recorder()
    ids: dict[int, str] = {}
    caplog.set_level(logging.WARNING, logger="rabbitq.status")
    async with running(Worker(app, hooks=recorder)):
        async with app.publisher() as pub:

            async def publish(first: int) -> None:
                for n in range(first, min(first + 50, N)):
                    ids[n] = await pub.publish(Step(n=n))

            # 1,000 messages, 50 every 0.3 s. The first 400, then the store is killed
            # once records were written (not after a time: a busy machine is slow), the
            # other 600 while it is down (at least 3.6 s), and it comes back 5 s after
            # the kill: records are written before, lost during and written after the
            # outage (the retries, dead letters and replays of the late messages).
            writer = app.status_writer
            assert writer is not None
            outage: asyncio.Task[None] | None = None
            for first in range(0, N, 50):
                if first == 400:
                    await wait_for(lambda: writer.counts["written"] >= 1000, timeout=60)
                    outage = asyncio.create_task(asyncio.to_thread(node.restart, 5.0))
                await publish(first)
                await asyncio.sleep(0.3)
            assert outage is not None
            await outage
        await wait_for(lambda: recorder.count("dead_lettered") == N // 10, timeout=60)
        await wait_for(lambda: recorder.count("succeeded") == N - N // 10, timeout=60)
        replaying = True
        tally = await dlq.replay(app.queue, url=broker_url, tracing=app.tracing)
        assert tally.done == N // 10
        await wait_for(lambda: recorder.count("succeeded") == N, timeout=60)
    # The worker stopped: its records are flushed. Acks were not affected.
    assert recorder.count("retried") == 3 * N // 10
    assert recorder.count("requeued") == 0
    assert all(calls[n] == plan(n).count("started") for n in range(N))
    assert await queue_depth(connection, app.queue) == 0
    assert await queue_depth(connection, app.queue + ".dlq") == 0
    lost = writer.counts["failed"] + writer.counts["dropped"]

    expected_total = sum(len(plan(n)) for n in range(N))
    present_total = missing = gaps = 0
    finals: Counter[str] = Counter()
    for n in range(N):
        status = await app.status(ids[n])
        states = [e.state for e in status.history] if status is not None else []
        assert is_subsequence(states, plan(n)), (n, states)
        written_once = {(e.state, e.at, e.attempt) for e in status.history} if status else set()
        assert len(written_once) == len(states), (n, states)  # no record stored twice
        present_total += len(states)
        missing += len(plan(n)) - len(states)
        gaps += len(states) < len(plan(n))
        finals[status.state if status is not None else "(none)"] += 1
    await writer.store.close()
    print(
        f"\nstatus of {N} messages, store cut 5 s: {expected_total} records expected, "
        f"{present_total} in the store, {missing} missing, {lost} counted lost "
        f"(failed {writer.counts['failed']}, dropped {writer.counts['dropped']}); "
        f"{gaps} messages with a gap; final states read back: {dict(finals)}"
    )
    # Every record is counted once: written, or lost (failed or dropped).
    assert writer.counts["written"] + lost == expected_total
    # Every missing record is counted lost. The converse holds but for a write that the
    # store applied and whose answer the kill cut off: counted lost, yet in the store
    # (seen once in CI: 2 records). So the store holds at least what was counted
    # written, and the gap is there.
    assert present_total >= writer.counts["written"]
    assert 0 < missing <= lost
    assert 0 < gaps < N and finals["succeeded"] >= N - gaps
    # Each outage is logged when it begins and when it ends, with what it lost: the cut,
    # and any write that failed on its own (such as an answer later than the store's 1 s
    # timeout on a loaded machine). CI once saw a second outage of 2 records, its cause
    # cut from the message; the message is whole now. Together the counts name every
    # record counted lost.
    lines = [r.getMessage() for r in caplog.records if r.name == "rabbitq.status"]
    said = "\n".join(lines)
    assert lines and len(lines) % 2 == 0, said
    assert all("being lost" in begun for begun in lines[0::2]), said
    ended = [re.search(r"is back: (\d+) status record\(s\) were lost", end) for end in lines[1::2]]
    assert all(ended), said
    assert sum(int(m[1]) for m in ended if m) == lost, said
