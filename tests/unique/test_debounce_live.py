"""Debounced publishes through a real broker, with the PostgreSQL and the Redis backend:
bursts of N publishes on each of K keys run K handlers, each with its key's last
payload, and N*K - K are superseded (status ``superseded``); ``rabbitq.testing`` says
so without a broker; an app that does not debounce has no stage on its consume path."""

from __future__ import annotations

import asyncio

import pytest

from rabbitq import App, Context, Message, Worker
from rabbitq.errors import Unroutable
from rabbitq.testing import deliver
from rabbitq.unique.setup import key_store
from rabbitq.unique.store import RUN
from tests.helpers import Recorder, declare_topology, running, wait_for


class Digest(Message, type="test.unique.digest"):
    user: int
    n: int


async def test_each_burst_runs_once_with_its_last_payload(make_keyed, connection):
    app = make_keyed(handler=False, debounce=True)
    runs: list[tuple[int, int, str]] = []

    @app.handler(Digest)
    async def digest(msg: Digest, ctx: Context) -> None:
        runs.append((msg.user, msg.n, ctx.message_id))

    await declare_topology(connection, app)
    bursts, keys = 10, 20
    ids: list[str] = []
    last: dict[int, str] = {}
    async with app.publisher() as pub:
        for n in range(bursts):  # the keys' bursts interleaved, each key's in order
            sent = await asyncio.gather(
                *(pub.publish(Digest(user=k, n=n), debounce=0.5, unique_key=f"digest:{k}")
                  for k in range(keys))
            )  # fmt: skip
            ids += sent
            last.update(enumerate(sent))
    # The worker starts once every burst is published: whatever the machine's speed,
    # each key's last publish is its latest when its messages are delivered.
    async def all_ended() -> bool:  # superseded ones are acked unrun: no hook says so
        await app.tracing.flush()
        found = [await app.status(mid) for mid in ids]
        return all(s is not None and s.state in ("succeeded", "superseded") for s in found)

    async with running(Worker(app)):
        await wait_for(all_ended, timeout=90, interval=0.5)
        await asyncio.sleep(0.5)  # nothing more comes
    await app.tracing.flush()
    states = [(await app.status(mid)).state for mid in ids]  # type: ignore[union-attr]
    superseded = states.count("superseded")
    print(f"{bursts} x {keys} debounced: {len(runs)} runs, {superseded} superseded")
    assert sorted((u, n) for u, n, _ in runs) == [(k, bursts - 1) for k in range(keys)]
    assert {mid for _, _, mid in runs} == set(last.values())
    assert superseded == bursts * keys - keys
    assert states.count("succeeded") == keys


async def test_testing_deliver_says_superseded(make_keyed):
    app = make_keyed(handler=False, debounce=True)
    ran: list[int] = []

    @app.handler(Digest)
    async def digest(msg: Digest) -> None:
        ran.append(msg.n)

    keys = key_store(app.idempotency)
    assert keys is not None
    for mid in ("old", "new"):
        await keys.propose("digest:1", mid, 60)
        await keys.commit("digest:1", mid)
    headers = {"rabbitq-debounce-key": "digest:1"}
    old = await deliver(app, Digest(user=1, n=1), headers=headers, message_id="old")
    assert old.acked and old.skipped == "superseded" and ran == []
    new = await deliver(app, Digest(user=1, n=2), headers=headers, message_id="new")
    assert new.acked and new.skipped is None and ran == [2]
    again = await deliver(app, Digest(user=1, n=2), headers=headers, message_id="new")
    assert again.skipped == "superseded" and ran == [2]  # its burst ended when it ran
    await keys.close()


def test_an_app_that_does_not_debounce_has_no_stage():
    from rabbitq.backends import PostgresBackend

    plain = App(queue="q", backend=PostgresBackend("postgresql://nowhere/db"))
    assert [s.name for s in plain.publish_steps] == ["unique"]
    assert plain.delivery_stages == ()
    debounced = App(queue="q", backend=PostgresBackend("postgresql://nowhere/db"), debounce=True)
    assert [s.name for s in debounced.publish_steps] == ["unique", "debounce"]
    assert [s.name for s in debounced.delivery_stages] == ["superseded"]  # type: ignore[attr-defined]


async def test_the_latest_waits_for_a_newer_publish_still_on_its_way(make_keyed, connection):
    """The edge: the burst's latest is delivered while a newer publish of its key has
    written its pending entry but is not yet confirmed. It must neither run (the newer
    one would run too: two runs in one burst) nor be dropped (that publish may fail):
    it looks again until the newer one is confirmed, then it is superseded."""
    app = make_keyed(handler=False, debounce=True)
    runs: list[int] = []

    @app.handler(Digest)
    async def digest(msg: Digest) -> None:
        runs.append(msg.n)

    await declare_topology(connection, app)
    keys = key_store(app.idempotency)
    assert keys is not None
    recorder = Recorder()
    async with running(Worker(app, hooks=recorder)), app.publisher() as pub:
        first = await pub.publish(Digest(user=1, n=1), debounce=0.2, unique_key="digest:1")
        await keys.propose("digest:1", "second", 60)  # a publish on its way, unconfirmed
        await wait_for(lambda: recorder.count("retried") >= 2, timeout=30)  # it looked again
        assert runs == []
        await pub.publish(
            Digest(user=1, n=2), debounce=0.2, unique_key="digest:1", message_id="second"
        )
        await wait_for(lambda: runs == [2], timeout=30)
        await asyncio.sleep(1.5)  # the first is not run after all
    await keys.close()
    assert runs == [2]
    await app.tracing.flush()
    st = await app.status(first)
    assert st is not None and st.state == "superseded"
    assert any(e.state == "retrying" and e.detail.get("deferred") for e in st.history)


async def test_a_debounced_publish_that_fails_withdraws_itself(make_keyed):
    app = make_keyed(handler=False, debounce=True)  # its queue never declared: unroutable
    app.handler(Digest)(lambda msg: None)
    keys = key_store(app.idempotency)
    assert keys is not None
    await keys.propose("digest:9", "a", 60)
    await keys.commit("digest:9", "a")  # the burst's latest so far
    async with app.publisher() as pub:
        with pytest.raises(Unroutable):
            await pub.publish(Digest(user=9, n=2), debounce=0.2, unique_key="digest:9")
    assert await keys.check("digest:9", "a") == RUN  # not left waiting for a ghost
    await keys.close()
