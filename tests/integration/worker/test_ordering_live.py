"""Ordered handlers against the real broker: a blocked key's later messages go to the
DLQ behind its dead letter, and replaying the DLQ unblocks it in order
(docs/ordering.md)."""

from __future__ import annotations

import pytest

from rabbitq import Message, Metrics, PermanentError, RetryPolicy, Worker
from rabbitq.dlq import replay
from tests.helpers import queue_depth, running, wait_for

pytestmark = pytest.mark.broker


class Entry(Message, type="test.ordering.entry"):
    account: str
    seq: int


async def test_a_blocked_key_waits_in_the_dlq_until_it_is_replayed(make_app, connection):
    app = make_app(queue_type="classic", retry=RetryPolicy(delays=(0.05,)))
    broken = {("a", 2)}
    seen: list[tuple[str, int]] = []

    @app.handler(Entry, ordered_by=lambda m: m.account, on_dead="block")
    async def apply(msg: Entry) -> None:
        if (msg.account, msg.seq) in broken:
            raise PermanentError("declined")
        seen.append((msg.account, msg.seq))

    metrics = Metrics()
    worker = Worker(app, hooks=metrics)
    async with running(worker):
        async with app.publisher() as pub:
            for seq in range(1, 5):
                for account in ("a", "b"):
                    await pub.publish(Entry(account=account, seq=seq))
        try:
            await wait_for(lambda: len(seen) == 5)
        except AssertionError:  # a late registry read once unblocked "a" (fixed): say why
            o = worker.ordering
            raise AssertionError(
                f"handled {seen}; blocked {o and o.blocked}; {getattr(o, '__dict__', o)}"
            ) from None
        await wait_for(lambda: queue_depth(connection, f"{app.queue}.dlq"), timeout=10)
        await wait_for(
            lambda: (
                metrics.registry.get_sample_value(
                    "rabbitq_ordered_keys_blocked", {"queue": app.queue}
                )
                == 1
            )
        )
        assert [s for a, s in seen if a == "b"] == [1, 2, 3, 4]
        assert [s for a, s in seen if a == "a"] == [1]
        assert "keys blocked behind a dead letter: 'a'" in (metrics.ready_detail() or "")
        await wait_for(lambda: _depth_is(connection, f"{app.queue}.dlq", 3))

        broken.clear()  # the operator fixed the cause: replay, in the DLQ's order
        await replay(app.queue, url=app.url)
        await wait_for(lambda: len(seen) == 8)

    assert [s for a, s in seen if a == "a"] == [1, 2, 3, 4]
    assert (
        metrics.registry.get_sample_value("rabbitq_ordered_keys_blocked", {"queue": app.queue}) == 0
    )


async def _depth_is(connection, queue: str, depth: int) -> bool:
    return await queue_depth(connection, queue) == depth
