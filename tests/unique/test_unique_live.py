"""Unique publishes through a real broker, with the PostgreSQL and the Redis backend:
racing producers send each key once, a window that ends lets the key be sent again, a
publish that fails frees its key, and a dead letter purged from the DLQ frees it too."""

from __future__ import annotations

import asyncio
import os
from collections import Counter

import pytest

from rabbitq import Context, PermanentError, Worker, dlq
from rabbitq.backends import RedisBackend
from rabbitq.errors import ConfigurationError, Unroutable
from rabbitq.unique.release import keys_released
from tests.helpers import (
    ROOT,
    Recorder,
    declare_topology,
    drain_queue,
    run_cli_async,
    running,
    wait_for,
)
from tests.unique.conftest import Capture


async def test_racing_producers_send_each_key_once(make_keyed, connection):
    app = make_keyed()
    await declare_topology(connection, app)
    keys = [f"capture:{i}" for i in range(50)]

    async def producer(p: int) -> dict[str, str]:
        async with app.publisher() as pub:
            got = {}
            for k in keys[p % 50 :] + keys[: p % 50]:  # each starts elsewhere: real races
                got[k] = await pub.publish(
                    Capture(order_id=int(k.split(":")[1]), producer=p),
                    unique_for=3600, unique_key=k,
                )  # fmt: skip
            return got

    answers = await asyncio.gather(*(producer(p) for p in range(20)))
    sent = await drain_queue(connection, app.queue)
    by_key = {m.headers["rabbitq-unique-key"]: m.message_id for m in sent}
    print(f"20 producers x 50 keys: {len(sent)} sent, {20 * 50 - len(sent)} refused")
    assert len(sent) == 50, Counter(m.headers["rabbitq-unique-key"] for m in sent)
    assert len(by_key) == 50
    for got in answers:
        assert got == by_key  # every producer was told the one id that was sent
    await app.tracing.flush()
    refused = [
        (k, mid) for got in answers for k, mid in got.items() if mid != by_key[k]
    ]  # nobody got an id other than the first: the refused publishes' own ids are
    assert refused == []  # not returned, and written as deduplicated (next test)


async def test_a_refused_publish_is_recorded_deduplicated(make_keyed, connection):
    app = make_keyed()
    await declare_topology(connection, app)
    async with app.publisher() as pub:
        first = await pub.publish(Capture(order_id=1), unique_for=60, unique_key="c:1")
        again = await pub.publish(
            Capture(order_id=1), unique_for=60, unique_key="c:1", message_id="second-try"
        )
    assert again == first
    await app.tracing.flush()
    st = await app.status("second-try")
    assert st is not None and st.state == "deduplicated" and st.final
    assert dict(st.history[-1].detail) == {
        "type": Capture.type_name(),
        "key": "c:1",
        "first": first,
    }
    assert len(await drain_queue(connection, app.queue)) == 1


async def test_the_key_defaults_to_the_message_id(make_keyed, connection):
    app = make_keyed()
    await declare_topology(connection, app)
    async with app.publisher() as pub:
        for _ in range(3):
            assert await pub.publish(Capture(order_id=1), unique_for=60, message_id="m-1") == "m-1"
    assert len(await drain_queue(connection, app.queue)) == 1


async def test_a_new_publish_is_sent_when_the_window_ended(make_keyed, connection):
    app = make_keyed()
    await declare_topology(connection, app)
    async with app.publisher() as pub:
        first = await pub.publish(Capture(order_id=2), unique_for=0.5, unique_key="c:2")
        assert await pub.publish(Capture(order_id=2), unique_for=0.5, unique_key="c:2") == first
        await asyncio.sleep(1.0)
        second = await pub.publish(Capture(order_id=2), unique_for=0.5, unique_key="c:2")
    assert second != first
    sent = await drain_queue(connection, app.queue)
    assert sorted(m.message_id for m in sent) == sorted([first, second])


async def test_a_publish_that_fails_frees_its_key(make_keyed, connection):
    app = make_keyed()  # no queue yet: a delayed publish is unroutable
    async with app.publisher() as pub:
        with pytest.raises(Unroutable):
            await pub.publish(Capture(order_id=3), unique_for=60, unique_key="c:3", delay=1)
        await declare_topology(connection, app)
        sent = await pub.publish(Capture(order_id=3), unique_for=60, unique_key="c:3")
    assert [m.message_id for m in await drain_queue(connection, app.queue)] == [sent]


async def test_a_purged_dead_letter_frees_its_key(make_keyed, broker_url):
    app = make_keyed(handler=False)
    ran: list[str] = []

    @app.handler(Capture)
    async def capture(msg: Capture, ctx: Context) -> None:
        ran.append(ctx.message_id)
        raise PermanentError("card declined")

    recorder = Recorder()
    async with running(Worker(app, hooks=recorder)), app.publisher() as pub:
        first = await pub.publish(Capture(order_id=4), unique_for=3600, unique_key="c:4")
        await wait_for(lambda: recorder.count("dead_lettered") == 1)
        # dead-lettered, not gone: the key is still held by it (a replay may run it)
        assert await pub.publish(Capture(order_id=4), unique_for=3600, unique_key="c:4") == first
        tally = await dlq.purge(app.queue, url=broker_url, released=[keys_released(app)])
        assert tally.done == 1
        second = await pub.publish(Capture(order_id=4), unique_for=3600, unique_key="c:4")
        assert second != first
        await wait_for(lambda: recorder.count("dead_lettered") == 2)
    assert ran == [first, second]


async def test_publish_keywords_are_refused_without_their_step(make_app, connection):
    app = make_app()
    async with app.publisher() as pub:
        with pytest.raises(ConfigurationError, match="unique_for needs a store"):
            await pub.publish(Capture(order_id=5), unique_for=60)
        with pytest.raises(ConfigurationError, match="debounce needs App"):
            await pub.publish(Capture(order_id=5), debounce=1, unique_key="d")


async def test_wrong_combinations_are_refused_before_anything_is_sent(make_keyed):
    app = make_keyed(debounce=True)
    async with app.publisher() as pub:
        with pytest.raises(ConfigurationError, match="unique_key needs unique_for"):
            await pub.publish(Capture(order_id=6), unique_key="k")
        with pytest.raises(ConfigurationError, match="not both"):
            await pub.publish(Capture(order_id=6), unique_for=1, debounce=1, unique_key="k")
        with pytest.raises(ConfigurationError, match="debounce needs unique_key"):
            await pub.publish(Capture(order_id=6), debounce=1)
        with pytest.raises(ConfigurationError, match="no delay= or at="):
            await pub.publish(Capture(order_id=6), debounce=1, unique_key="k", delay=5)
        with pytest.raises(ConfigurationError, match="unique_for must be positive"):
            await pub.publish(Capture(order_id=6), unique_for=-1)


SERVICE = """
from rabbitq import App
from rabbitq.backends import PostgresBackend, RedisBackend
from tests.unique.conftest import Capture

app = App(queue={queue!r}, exchange={exchange!r}, backend={backend})


@app.handler(Capture)
async def capture(msg: Capture) -> None:
    pass
"""


async def test_rabbitq_purge_frees_the_keys_of_what_it_deletes(
    make_keyed, connection, backend, broker_url, tmp_path
):
    app = make_keyed()
    await declare_topology(connection, app)
    where = backend.location
    made = (
        f"RedisBackend({where.url!r}, key_prefix={where.base!r})"
        if isinstance(backend, RedisBackend)
        else f"PostgresBackend({where.dsn!r}, prefix={where.prefix!r})"
    )
    (tmp_path / "service.py").write_text(
        SERVICE.format(queue=app.queue, exchange=app.exchange, backend=made)
    )
    async with app.publisher() as pub:
        first = await pub.publish(Capture(order_id=7), unique_for=3600, unique_key="c:7")
        await pub.publish(Capture(order_id=8))  # no key: purged all the same
        assert await pub.publish(Capture(order_id=7), unique_for=3600, unique_key="c:7") == first
        env = {"PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
        result = await run_cli_async(
            "purge", "service:app", "--yes", cwd=tmp_path, url=broker_url, env=env
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout == f"{app.queue}: 2 message(s) purged\n"
        again = await pub.publish(Capture(order_id=7), unique_for=3600, unique_key="c:7")
    assert again != first
    assert [m.message_id for m in await drain_queue(connection, app.queue)] == [again]


async def test_publish_many_holds_each_message_s_own_key(make_keyed, connection):
    app = make_keyed()
    await declare_topology(connection, app)
    batch = [Capture(order_id=n % 3, producer=n) for n in range(6)]  # keys c:0, c:1, c:2
    async with app.publisher() as pub:
        first = await pub.publish(Capture(order_id=0), unique_for=60, unique_key="c:0")
        ids = await pub.publish_many(
            batch, window=1, unique_for=60, unique_key=lambda m: f"c:{m.order_id}"
        )
    sent = await drain_queue(connection, app.queue)
    keys = sorted(m.headers["rabbitq-unique-key"] for m in sent)
    assert keys == ["c:0", "c:1", "c:2"]  # c:0 held by the first publish: not sent again
    assert ids[0] == ids[3] == first and ids[1] == ids[4] and ids[2] == ids[5]
    assert {m.message_id for m in sent} == {first, ids[1], ids[2]}


async def test_publish_many_refuses_a_unique_window_without_a_key_function(make_keyed):
    app = make_keyed()
    async with app.publisher() as pub:
        for kwargs in ({"unique_for": 60}, {"unique_for": 60, "unique_key": "one-for-all"}):
            with pytest.raises(ConfigurationError, match="needs unique_key=a function"):
                await pub.publish_many([Capture(order_id=1)], **kwargs)
