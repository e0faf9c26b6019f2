"""Pausing a schedule (``rabbitq schedule pause|resume MODULE:APP NAME``), on the broker
beside the schedules' lease and progress record.

A paused schedule is a durable queue ``<queue>.schedules.paused.<name>`` holding one
message (when and by whom). Declaring it pauses and deleting it resumes: each is one
atomic broker operation, so two people pausing two schedules at once never overwrite
each other (a shared record would need a read-modify-write). The leader asks before
each tick (a passive declare); a tick that falls while its schedule is paused is
skipped and recorded as handled, so resuming publishes the next tick, not the missed
ones (no catch-up of a pause).
"""

from __future__ import annotations

import contextlib
import getpass
import socket
from dataclasses import dataclass
from datetime import UTC, datetime

import aio_pika
import aiormq
import orjson
from aio_pika.abc import AbstractConnection
from pamqp.commands import Basic

from .._amqp.connection import connect_once
from ..errors import ConfigurationError
from ..settings import TLS
from .spec import ScheduledApp


def paused_queue(queue: str, name: str) -> str:
    """The queue whose existence says that schedule ``name`` of ``queue`` is paused."""
    return f"{queue}.schedules.paused.{name}"


@dataclass(frozen=True, slots=True)
class Paused:
    """A pause: since when, by whom (``""``/None when its record cannot be read)."""

    since: datetime | None
    by: str


def _who() -> str:
    try:
        return f"{getpass.getuser()}@{socket.gethostname()}"
    except (KeyError, OSError):  # no user name for this uid
        return socket.gethostname()


def check_name(app: ScheduledApp, name: str) -> None:
    """A one-line ConfigurationError unless ``app`` has a schedule ``name``."""
    if name not in app.schedules:
        known = ", ".join(sorted(app.schedules)) or "none"
        raise ConfigurationError(f"no schedule named {name!r} (the app has: {known})")


async def is_paused(connection: AbstractConnection, queue: str, name: str) -> bool:
    """Whether schedule ``name`` is paused now (a passive declare on a channel of its own:
    the broker closes a channel whose passive declare finds nothing)."""
    channel = await connection.channel(publisher_confirms=False)
    try:
        await channel.declare_queue(paused_queue(queue, name), passive=True)
    except aiormq.exceptions.ChannelNotFoundEntity:
        return False
    with contextlib.suppress(Exception):
        await channel.close()
    return True


async def read(connection: AbstractConnection, queue: str, name: str) -> Paused | None:
    """Schedule ``name``'s pause, None if it is not paused (its record is read without
    taking it: unacked, it goes back when the channel closes)."""
    channel = await connection.channel(publisher_confirms=False)
    underlay = await channel.get_underlay_channel()
    try:
        await underlay.queue_declare(paused_queue(queue, name), passive=True)
    except aiormq.exceptions.ChannelNotFoundEntity:
        return None
    got = await underlay.basic_get(paused_queue(queue, name), no_ack=False)
    with contextlib.suppress(Exception):
        await channel.close()
    if not isinstance(got.delivery, Basic.GetOk):
        return Paused(None, "")
    try:
        data = orjson.loads(got.body)
        return Paused(datetime.fromisoformat(data["since"]), str(data["by"]))
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return Paused(None, "")


async def _connect(
    app: ScheduledApp, url: str | None, tls: TLS | None, what: str
) -> AbstractConnection:
    return await connect_once(app.resolved_url(url), name=f"rabbitq schedule {what}",
                              tls=tls or app.tls)  # fmt: skip


async def pause(
    app: ScheduledApp, name: str, *, url: str | None = None, tls: TLS | None = None
) -> Paused | None:
    """Pause schedule ``name``; the earlier pause if it was paused already (unchanged),
    else None."""
    check_name(app, name)
    connection = await _connect(app, url, tls, "pause")
    try:
        earlier = await read(connection, app.queue, name)
        if earlier is not None:
            return earlier
        channel = await connection.channel()  # with confirms: the record is kept
        q = await channel.declare_queue(
            paused_queue(app.queue, name),
            durable=True,
            arguments={"x-queue-type": app.queue_type, "x-max-length": 1},
        )
        body = orjson.dumps({"since": datetime.now(UTC).isoformat(), "by": _who()})
        message = aio_pika.Message(body, delivery_mode=aio_pika.DeliveryMode.PERSISTENT)
        await channel.default_exchange.publish(message, routing_key=q.name)
        await channel.close()
        return None
    finally:
        with contextlib.suppress(Exception):
            await connection.close()


async def resume(
    app: ScheduledApp, name: str, *, url: str | None = None, tls: TLS | None = None
) -> bool:
    """Resume schedule ``name``; False if it was not paused."""
    check_name(app, name)
    connection = await _connect(app, url, tls, "resume")
    try:
        if await read(connection, app.queue, name) is None:
            return False
        channel = await connection.channel(publisher_confirms=False)
        await channel.queue_delete(paused_queue(app.queue, name))
        await channel.close()
        return True
    finally:
        with contextlib.suppress(Exception):
            await connection.close()
