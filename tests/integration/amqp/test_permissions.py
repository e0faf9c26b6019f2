"""The permission recipe of docs/safety.md ("Permissions"), against broker users with
exactly its rights (issue 33, item 6): the worker, a producer, a producer with delays and
a DLQ operator each do their work, and what the recipe forbids is refused by the broker.
It also shows the exposure the page states: write on ``rabbitq.delay.deliver`` lets a
delayed producer put a message into any rabbitq queue of the vhost, where the worker
handles it only as a type its queue is bound for (any other is dead-lettered
``unknown-type``).

A vhost and four users of this test's own are made with ``rabbitmqctl`` on the shared
broker (unique names) and deleted after it."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from urllib.parse import quote, urlsplit

import aio_pika
import aiormq
import pytest

from rabbitq import App, Message, Worker
from rabbitq.ladder.plan import DELAY_TO, DELIVER_EXCHANGE

from ...helpers import Recorder, run_cli_async, running, wait_for

pytestmark = pytest.mark.broker


class Mail(Message, type="test.perm.mail"):
    n: int


class Refund(Message, type="test.perm.refund"):
    n: int


def recipe(queue: str, exchange: str) -> dict[str, tuple[str, str, str]]:
    """docs/safety.md's table, for an app ``App(queue=queue, exchange=exchange)`` whose
    names need no regex escaping: role -> (configure, write, read)."""
    q = f"{queue}|{queue}\\..+"
    delay = "rabbitq\\.delay\\..+"
    return {
        "worker": (f"^({q}|{exchange}|{delay})$", f"^({q}|{exchange}|{delay}|amq\\.default)$",
                   f"^({q}|{exchange}|{delay})$"),
        "producer": (f"^{exchange}$", f"^{exchange}$", "^$"),
        "delayed": (f"^({exchange}|{delay})$", f"^({exchange}|{delay}|{queue})$", f"^{delay}$"),
        "operator": ("^$", "^amq\\.default$", f"^{queue}\\.dlq$"),
    }  # fmt: skip


def ctl(*args: str) -> None:
    done = subprocess.run(["rabbitmqctl", "-q", *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture
def vhost(broker_url: str, uid: str) -> Iterator[tuple[str, dict[str, str]]]:
    """A vhost of this test's own, guest allowed everything there (to look and clean up),
    and one user per role with exactly the recipe's rights: ``(vhost, role -> URL)``."""
    if shutil.which("rabbitmqctl") is None:
        pytest.skip("rabbitmqctl is not installed")
    name = f"t-{uid}-perm"
    parts = urlsplit(broker_url)
    base = f"{parts.scheme}://%s:%s@{parts.hostname}:{parts.port or 5672}/{quote(name, safe='')}"
    queue, exchange = f"t-{uid}-mail", f"t-{uid}-x"
    users: list[str] = []
    urls: dict[str, str] = {"guest": broker_url.rstrip("/") + "/" + quote(name, safe="")}
    ctl("add_vhost", name)
    try:
        ctl("set_permissions", "-p", name, parts.username or "guest", ".*", ".*", ".*")
        for role, rights in recipe(queue, exchange).items():
            user, password = f"t-{uid}-{role}", uuid.uuid4().hex
            ctl("add_user", user, password)
            users.append(user)
            ctl("set_permissions", "-p", name, user, *rights)
            urls[role] = base % (user, password)
        yield name, urls
    finally:
        for user in users:
            with contextlib.suppress(AssertionError):
                ctl("delete_user", user)
        ctl("delete_vhost", name)


async def refused(url: str, what) -> str:
    """Run ``what(channel)`` on a connection of its own; the broker's refusal (a
    channel closed with ACCESS_REFUSED), as text, else fail."""
    connection = await aio_pika.connect(url)
    try:
        channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
        with pytest.raises(aiormq.exceptions.ChannelAccessRefused) as caught:
            await what(channel)
        return str(caught.value)
    finally:
        await connection.close()


def raw(headers: dict[str, str] | None = None, type_name: str = Mail.type_name()):
    return aio_pika.Message(b'{"n": 99}', type=type_name, headers=headers or {},
                            delivery_mode=aio_pika.DeliveryMode.PERSISTENT)  # fmt: skip


async def test_each_role_works_with_the_recipes_rights_and_nothing_more(vhost, uid):
    name, urls = vhost
    queue, exchange = f"t-{uid}-mail", f"t-{uid}-x"
    other = f"t-{uid}-other"  # another app's queue on the vhost, declared by guest

    def app_for(role: str) -> App:
        return App(queue=queue, exchange=exchange, url=urls[role])

    worker_app = app_for("worker")
    handled: list[int] = []

    @worker_app.handler(Mail)
    async def mail(msg: Mail) -> None:
        handled.append(msg.n)

    hooks = Recorder()
    guest = await aio_pika.connect(urls["guest"])
    try:
        async with running(Worker(worker_app, hooks=hooks)):  # declares everything it needs
            producer = app_for("producer")
            producer.handler(Mail)(mail)
            async with producer.publisher() as pub:
                await pub.publish(Mail(n=1))
                with pytest.raises(Exception, match="ACCESS_REFUSED|access"):
                    await pub.publish(Mail(n=2), delay=0.2)  # no rights on the ladder
            delayed = app_for("delayed")
            delayed.handler(Mail)(mail)
            async with delayed.publisher() as pub:
                await pub.publish(Mail(n=3))
                await pub.publish(Mail(n=4), delay=0.3)
            await wait_for(lambda: sorted(handled) == [1, 3, 4], timeout=30)

            # What the recipe forbids, role by role.
            for role in ("producer", "delayed", "operator"):
                await refused(urls[role], lambda ch: ch.declare_queue(f"t-{uid}-new", durable=True))
            for role in ("producer", "delayed"):  # the operator's replay needs this one
                await refused(urls[role], lambda ch: _publish(ch, "", raw(), queue))
                await refused(urls[role], lambda ch: _get(ch, queue))
            await refused(urls["producer"], lambda ch: _publish(ch, DELIVER_EXCHANGE, raw(
                {DELAY_TO: queue}), ""))
            await refused(urls["worker"], lambda ch: ch.declare_queue(other, durable=True))

            # The DLQ operator lists and replays, and reads no other queue.
            ch = await guest.channel()
            await ch.declare_queue(other, durable=True)
            await _publish(ch, "", raw(type_name="test.perm.unknown"), queue)
            await wait_for(lambda: hooks.count("dead_lettered") == 1, timeout=30)
            listed = await run_cli_async("dlq", "list", queue, "--json", url=urls["operator"])
            assert listed.returncode == 0 and "unknown-type" in listed.stdout, listed.stderr
            await refused(urls["operator"], lambda ch: _get(ch, queue))
            await refused(urls["operator"], lambda ch: _get(ch, other))

            # The exposure: write on the ladder reaches any queue bound to the deliver
            # exchange. A type the queue is not bound for is dead-lettered, not handled.
            await _open(urls["delayed"], lambda ch: _publish(
                ch, DELIVER_EXCHANGE, raw({DELAY_TO: queue}, Refund.type_name()), ""))
            await wait_for(lambda: hooks.count("dead_lettered") == 2, timeout=30)
            assert sorted(handled) == [1, 3, 4]

            # The operator's replay (through amq.default): both back, dead again.
            moved = await run_cli_async("dlq", "replay", queue, url=urls["operator"])
            assert moved.returncode == 0 and "moved 2" in moved.stderr + moved.stdout, moved
            await wait_for(lambda: hooks.count("dead_lettered") == 4, timeout=30)
            stats = await run_cli_async("stats", queue, url=urls["operator"])
            assert stats.returncode == 0, stats.stderr
    finally:
        await guest.close()


async def _publish(channel, exchange: str, message, routing_key: str) -> None:
    target = channel.default_exchange if not exchange else await channel.get_exchange(
        exchange, ensure=False)
    await target.publish(message, routing_key=routing_key, mandatory=True)


async def _get(channel, queue: str) -> None:
    await (await channel.get_queue(queue, ensure=False)).get(fail=False)


async def _open(url: str, what) -> None:
    connection = await aio_pika.connect(url)
    try:
        await what(await connection.channel(publisher_confirms=True, on_return_raises=True))
    finally:
        await connection.close()
