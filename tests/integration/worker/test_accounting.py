"""Accounting under random failures: every message published ends handled or
dead-lettered, exactly once, and nothing is left behind in any queue.

Whether attempt ``a`` of message ``n`` fails is drawn from a random generator seeded
with ``(SEED, n, a)``, so the outcome of each message does not depend on the order in
which concurrent handlers happen to run, and the expected DLQ is known in advance.
"""

from __future__ import annotations

import random
from collections import Counter

from rabbitq import Context, Message, RetryPolicy, Worker
from tests.helpers import Recorder, drain_queue, queue_depth, running, wait_for

SEED = 20240611
MESSAGES = 1000
FAILURE_RATE = 0.3
DELAYS = (0.2, 0.5)
ATTEMPTS = 1 + len(DELAYS)


class Job(Message, type="test.accounting.job"):
    n: int


def fails(n: int, attempt: int) -> bool:
    """The seeded draw: does attempt ``attempt`` of message ``n`` fail?"""
    return random.Random(f"{SEED}:{n}:{attempt}").random() < FAILURE_RATE


async def test_every_message_ends_handled_or_dead_lettered_and_none_is_lost(
    make_app, connection, record_property
):
    app = make_app(retry=RetryPolicy(delays=DELAYS), prefetch=50)
    successes: Counter[str] = Counter()  # message_id -> handler successes
    calls: Counter[tuple[str, int]] = Counter()  # (message_id, attempt) -> handler calls

    @app.handler(Job)
    async def job(msg: Job, ctx: Context) -> None:
        calls[(ctx.message_id, ctx.attempt)] += 1
        if fails(msg.n, ctx.attempt):
            raise RuntimeError(f"seeded failure of message {msg.n} on attempt {ctx.attempt}")
        successes[ctx.message_id] += 1

    rec = Recorder()
    topology = app.topology()
    async with running(Worker(app, hooks=rec)):
        async with app.publisher() as pub:
            ids = await pub.publish_many(Job(n=n) for n in range(MESSAGES))
        await wait_for(
            lambda: rec.count("succeeded") + rec.count("dead_lettered") >= MESSAGES, timeout=60
        )
    published = set(ids)
    by_id = dict(zip(ids, range(MESSAGES), strict=True))

    # Nothing is left anywhere but in the DLQ.
    for spec in (topology.main, *topology.retries):
        assert await queue_depth(connection, spec.name) == 0, f"{spec.name} is not empty"
    dead = await drain_queue(connection, topology.dlq.name)
    dead_ids = [m.message_id for m in dead]
    handled = set(successes)

    duplicates = {mid: k for mid, k in successes.items() if k > 1}
    redelivered = {key: k for key, k in calls.items() if k > 1}
    dlq_duplicates = len(dead_ids) - len(set(dead_ids))
    report = (
        f"published={len(published)} handled={len(handled)} dead={len(set(dead_ids))} "
        f"retried={rec.count('retried')} duplicate_successes={len(duplicates)} "
        f"redelivered_attempts={len(redelivered)} duplicate_dlq_copies={dlq_duplicates}"
    )
    print(f"\naccounting: {report}")
    record_property("accounting", report)
    record_property("duplicates", len(duplicates))

    assert len(published) == MESSAGES
    assert handled | set(dead_ids) == published, "a message was lost"
    assert handled & set(dead_ids) == set(), "a message was both handled and dead-lettered"
    # Without faults (no lost connection, no failed ack) nothing is delivered twice.
    assert duplicates == {}
    assert redelivered == {}
    assert dlq_duplicates == 0

    # The seeded draws say exactly which messages use up their attempts.
    expected_dead = {
        mid for mid, n in by_id.items() if all(fails(n, a) for a in range(1, ATTEMPTS + 1))
    }
    assert set(dead_ids) == expected_dead
    # ... and each message was tried up to its first successful attempt, no more, no less.
    tried = {(mid, a) for mid, a in calls}
    expected_tried = set()
    for mid, n in by_id.items():
        for a in range(1, ATTEMPTS + 1):
            expected_tried.add((mid, a))
            if not fails(n, a):
                break
    assert tried == expected_tried
    assert rec.count("retried") == len(expected_tried) - MESSAGES
    for m in dead:
        assert m.headers["rabbitq-reason"] == "exhausted"
        assert m.headers["rabbitq-attempt"] == ATTEMPTS
