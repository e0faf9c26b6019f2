"""What ``rabbitq schedule list`` shows: each schedule's last tick and next fire time,
whether a scheduler leads now, and which are paused (:mod:`.pause`).

The last tick comes from the progress record, read without taking it: the messages
got are never acked, so closing the channel returns them. Whether someone leads comes
from the lease queue: a passive declare is refused with ``RESOURCE_LOCKED`` while
another connection holds it, and with ``NOT_FOUND`` when nobody does.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import aiormq
from pamqp.commands import Basic

from .._amqp.connection import connect_once
from ..settings import TLS
from . import pause, plan
from .spec import ScheduledApp

if TYPE_CHECKING:
    from aio_pika.abc import AbstractConnection



@dataclass(frozen=True, kw_only=True, slots=True)
class Row:
    """One schedule as listed."""

    name: str
    when: str
    catch_up: str
    last: datetime | None  # the last tick published (None: never, as far as recorded)
    next: datetime  # its next fire time after now
    paused: pause.Paused | None = None  # rabbitq schedule pause (None: running)


@dataclass(frozen=True, kw_only=True, slots=True)
class Listing:
    """Every schedule of an app, and its leadership."""

    rows: list[Row]
    leading: bool  # a scheduler holds the lease now
    leader: str  # who wrote the last progress record ("" if none)
    written: datetime | None  # when


def rows(app: ScheduledApp, progress: plan.Progress, now: datetime) -> list[Row]:
    """The rows for ``app``'s schedules given the recorded ``progress`` (pure)."""
    return [
        Row(
            name=name,
            when=s.when,
            catch_up=s.catch_up,
            last=None
            if name not in progress.published
            else progress.published[name].astimezone(s.tz),
            next=s.next_after(now),
        )
        for name, s in app.schedules.items()
    ]


async def read(app: ScheduledApp, *, url: str | None = None, tls: TLS | None = None) -> Listing:
    """Read ``app``'s progress record and lease from the broker."""
    connection = await connect_once(
        app.resolved_url(url), name="rabbitq schedule list", tls=tls or app.tls
    )
    try:
        progress = plan.merge(await _records(connection, plan.progress_queue(app.queue)))
        leading = await _held(connection, plan.lease_queue(app.queue))
        paused = {n: await pause.read(connection, app.queue, n) for n in app.schedules}
    finally:
        with contextlib.suppress(Exception):
            await connection.close()
    return Listing(
        rows=[
            dataclasses.replace(r, paused=paused[r.name])
            for r in rows(app, progress, datetime.now(UTC))
        ],
        leading=leading,
        leader=progress.leader,
        written=progress.written,
    )


async def _records(connection: AbstractConnection, queue: str) -> list[plan.Progress]:
    channel = await connection.channel(publisher_confirms=False)
    underlay = await channel.get_underlay_channel()
    found: list[plan.Progress] = []
    try:
        await underlay.queue_declare(queue, passive=True)
    except aiormq.exceptions.ChannelNotFoundEntity:
        return found  # no scheduler ever ran
    while True:
        message = await underlay.basic_get(queue, no_ack=False)
        if not isinstance(message.delivery, Basic.GetOk):
            break
        record = plan.decode_progress(message.body)
        if record is not None:
            found.append(record)
    await channel.close()  # unacked: every record goes back as it was
    return found


async def _held(connection: AbstractConnection, lease: str) -> bool:
    channel = await connection.channel(publisher_confirms=False)
    try:
        await channel.declare_queue(lease, passive=True)
    except aiormq.exceptions.ChannelLockedResource:
        return True
    except aiormq.exceptions.ChannelNotFoundEntity:
        return False
    with contextlib.suppress(Exception):
        await channel.close()
    return True
