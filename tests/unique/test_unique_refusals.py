"""A refused unique publish names only a message the broker confirmed (issue 40, item 3).

Process A takes 50 unique keys and is killed -9: before its confirms (its sends never
reach the broker), process B's publishes of the same keys wait for A's pending lease to
lapse and send their own, exactly one message per key; after its confirms, B is told
A's ids and nothing more is sent. Before: B was told A's ids either way, and nothing of
those keys was ever sent (the keys were held for A's 120 s lease)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import pytest

from rabbitq.backends import RedisBackend
from rabbitq.errors import PublishError
from rabbitq.unique import steps
from rabbitq.unique.store import UNIQUE_LEASE, pending_lease, poll_waits
from tests.helpers import ROOT, declare_topology, drain_queue
from tests.unique.conftest import Capture

pytestmark = [pytest.mark.services, pytest.mark.broker, pytest.mark.timeout(180)]
KEYS = 50

PUBLISHER_A = """
import asyncio, sys
from rabbitq import App
from rabbitq._amqp.publisher import Publisher
from rabbitq.backends import PostgresBackend, RedisBackend
from tests.unique.conftest import Capture

queue, exchange, url, backend, mode, keys = sys.argv[1:7]
app = App(queue=queue, exchange=exchange, url=url, backend=eval(backend))
started = 0

if mode == "unconfirmed":  # its sends hang: killed before any confirm
    async def hang(self, out):
        global started
        started += 1
        if started == int(keys):
            print("taken", flush=True)
        await asyncio.Event().wait()
    Publisher._send = hang


async def main():
    async with app.publisher() as pub:
        ids = await asyncio.gather(*(
            pub.publish(Capture(order_id=k), unique_for=3600, unique_key=f"key:{k}")
            for k in range(int(keys))
        ))
    print(" ".join(ids), flush=True)
    await asyncio.Event().wait()  # confirmed: killed now

asyncio.run(main())
"""


def described(backend) -> str:
    where = backend.location
    if isinstance(backend, RedisBackend):
        return f"RedisBackend({where.url!r}, key_prefix={where.base!r})"
    return f"PostgresBackend({where.dsn!r}, prefix={where.prefix!r})"


async def run_a_then_kill(app, backend, broker_url: str, mode: str) -> str:
    """Run publisher A until it has taken every key (``unconfirmed``) or printed its
    confirmed ids (``confirmed``), then kill -9 it; its last line."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", PUBLISHER_A, app.queue, app.exchange, broker_url,
        described(backend), mode, str(KEYS),
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
    finally:
        proc.send_signal(signal.SIGKILL)
        _, err = await proc.communicate()
    assert line, err.decode()[-2000:]
    return line.decode().strip()


async def publish_b(app) -> dict[int, str]:
    async with app.publisher() as pub:
        ids = await asyncio.gather(
            *(
                pub.publish(Capture(order_id=k), unique_for=3600, unique_key=f"key:{k}")
                for k in range(KEYS)
            )
        )
    return dict(enumerate(ids))


async def test_a_publisher_killed_before_its_confirms_leaves_the_keys_to_the_next(
    make_keyed, backend, connection, broker_url
):
    app = make_keyed()
    await declare_topology(connection, app)
    assert await run_a_then_kill(app, backend, broker_url, "unconfirmed") == "taken"
    got = await publish_b(app)  # waits for A's leases to lapse (UNIQUE_LEASE), then sends
    sent = await drain_queue(connection, app.queue)
    by_key = {int(m.headers["rabbitq-unique-key"].split(":")[1]): m.message_id for m in sent}
    print(f"\nA killed -9 before its confirms: B sent {len(sent)} of {KEYS} keys")
    assert len(sent) == KEYS and by_key == got  # one message per key, each B's own


async def test_a_publisher_killed_after_its_confirms_keeps_the_keys(
    make_keyed, backend, connection, broker_url
):
    app = make_keyed()
    await declare_topology(connection, app)
    a_ids = (await run_a_then_kill(app, backend, broker_url, "confirmed")).split()
    assert len(a_ids) == KEYS
    got = await publish_b(app)
    sent = await drain_queue(connection, app.queue)
    print(f"\nA killed -9 after its confirms: B told A's ids {list(got.values()) == a_ids}")
    assert list(got.values()) == a_ids  # B is refused with A's confirmed ids
    assert sorted(m.message_id for m in sent) == sorted(a_ids)  # and nothing more is sent


async def test_a_holder_pending_past_the_wait_refuses_with_nothing_sent(
    make_keyed, connection, monkeypatch
):
    app = make_keyed()
    await declare_topology(connection, app)
    store = next(s.store for s in app.publish_steps if s.name == "unique")
    assert await store.take("stuck", "a-slow-one", 60) is None  # pending, renewed elsewhere
    monkeypatch.setattr(steps, "CONFIRM_WAIT", 0.5)
    async with app.publisher() as pub:
        with pytest.raises(PublishError, match="held by a-slow-one, whose publish is not"):
            await pub.publish(Capture(order_id=1), unique_for=60, unique_key="stuck")
    assert await drain_queue(connection, app.queue) == []


def test_the_pending_lease_never_outlasts_the_window_and_the_polls_are_bounded() -> None:
    assert pending_lease(3600) == UNIQUE_LEASE
    assert pending_lease(2.0) == 2.0
    assert pending_lease(-1.0) == 0.001  # the window is over: (almost) free at once
    waits = poll_waits()
    assert [next(waits) for _ in range(6)] == [0.05, 0.1, 0.2, 0.4, 0.5, 0.5]
