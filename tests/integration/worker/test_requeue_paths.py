"""How the worker returns a delivery to its queue: ``basic.nack`` where it chose not to
run it (RabbitMQ 4.3 then leaves the delivery count alone), ``basic.reject`` where a
failure may be the message's own and must count toward a quorum queue's delivery limit
(4.3 counts rejects only; 3.10 counts both, verified here by ``x-delivery-count``)."""

from __future__ import annotations

from rabbitq import Context, Message, Worker
from rabbitq._worker.acks import Acker
from rabbitq._worker.settle import Settler
from tests.helpers import Recorder, running, wait_for


class Ping(Message, type="test.requeue.ping"):
    n: int


async def test_a_delivery_that_could_not_be_settled_is_rejected_so_its_count_rises(
    make_app, monkeypatch
):
    app = make_app(queue_type="quorum")
    counts: list[object] = []

    @app.handler(Ping)
    async def ping(msg: Ping, ctx: Context) -> None:
        counts.append(ctx.headers.get("x-delivery-count"))

    frames: list[str] = []
    for name in ("nack", "reject"):
        original = getattr(Acker, name)

        async def spy(self: Acker, tag: int, _name: str = name, _original=original) -> bool:
            frames.append(_name)
            return await _original(self, tag)

        monkeypatch.setattr(Acker, name, spy)
    settle = Settler._settle
    failures = [RuntimeError("a bug while settling")]

    async def failing_once(self, *args, **kwargs):
        if failures:
            raise failures.pop()
        return await settle(self, *args, **kwargs)

    monkeypatch.setattr(Settler, "_settle", failing_once)
    monkeypatch.setattr("rabbitq._worker.settle.REQUEUE_BACKOFF", 0.01)
    rec = Recorder()
    async with running(Worker(app, hooks=rec)):
        async with app.publisher() as pub:
            await pub.publish(Ping(n=1))
        await wait_for(lambda: rec.count("succeeded") == 1)
    assert frames == ["reject"]
    assert counts == [None, 1]  # the quorum queue counted the reject
