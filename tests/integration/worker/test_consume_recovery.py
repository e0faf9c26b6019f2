"""The worker consumes on aiormq's channel itself, so it must consume again by itself
whenever that channel is replaced: after a channel error, and after the broker cancels
its consumer because the queue was deleted."""

from __future__ import annotations

from rabbitq import Message, Worker
from rabbitq.hooks import Hooks
from tests.helpers import Recorder, running, wait_for


class Tick(Message, type="test.recovery.tick"):
    n: int


async def test_after_a_channel_error_the_worker_consumes_again_and_loses_nothing(make_app):
    app = make_app(prefetch=10)
    seen: list[int] = []

    @app.handler(Tick)
    async def tick(msg: Tick) -> None:
        seen.append(msg.n)

    rec = Recorder()
    worker = Worker(app, hooks=rec)
    async with running(worker), app.publisher() as pub:
        await pub.publish_many([Tick(n=n) for n in range(5)])
        await wait_for(lambda: rec.count("succeeded") == 5)
        channel = worker.consumer._consuming_on
        assert channel is not None
        # An ack of a tag the broker never sent closes the channel (PRECONDITION_FAILED);
        # aio-pika reopens it, and the worker must consume on the new one.
        await channel.basic_ack(10_000)
        await wait_for(lambda: worker.consumer._consuming_on is not channel, timeout=30)
        await pub.publish_many([Tick(n=n) for n in range(5, 10)])
        await wait_for(lambda: rec.count("succeeded") == 10, timeout=30)
    assert sorted(seen) == list(range(10))


class Consuming(Hooks):
    """The worker's consuming and re-declaring, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []

    def consuming_changed(self, queue: str, consuming: bool) -> None:
        self.events.append(("consuming", consuming))

    def topology_redeclared(self, queue: str, reason: str) -> None:
        self.events.append(("redeclared", reason))


async def test_a_worker_whose_queue_is_deleted_declares_it_again_and_consumes(make_app, connection):
    # One behaviour (docs/reliability.md, "The worker owns its topology"): the cancel
    # makes the worker declare its topology again at once and consume again. The
    # not-ready window lasts milliseconds, so it is seen through the hooks, in order,
    # not by polling ``worker.ready``.
    app = make_app(prefetch=10)
    seen: list[int] = []

    @app.handler(Tick)
    async def tick(msg: Tick) -> None:
        seen.append(msg.n)

    hooks = Consuming()
    worker = Worker(app, hooks=hooks)
    async with running(worker), app.publisher() as pub:
        await pub.publish(Tick(n=1))
        await wait_for(lambda: seen == [1])
        assert hooks.events == [("consuming", True)]
        channel = await connection.channel()
        await channel.queue_delete(app.queue)  # the broker cancels the worker's consumer
        await channel.close()
        await wait_for(lambda: len(hooks.events) >= 4, timeout=30)
        assert hooks.events == [
            ("consuming", True),
            ("consuming", False),
            ("redeclared", "consumer_cancelled"),
            ("consuming", True),
        ]
        assert worker.ready.is_set() and worker.keeper.redeclared == 1
        await pub.publish(Tick(n=2))  # routed to the new queue, consumed there
        await wait_for(lambda: seen == [1, 2], timeout=30)
