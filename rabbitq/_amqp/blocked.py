"""Whether the broker blocks this connection (``connection.blocked``: a resource alarm).

Under a memory or disk alarm RabbitMQ stops reading from every connection that
publishes: a worker's retry and DLQ copies, its acks, even its ``connection.close``
wait until the alarm clears. The worker must say so (``/readyz`` 503 "broker blocked:
...", the ``rabbitq_connection_blocked`` gauge, the log), give its copies a deadline,
and still stop on SIGTERM (see docs/reliability.md).

aiormq tracks the state but offers no callback: :class:`BlockedWatch` asks the public
``Connection.ready()`` (which waits while the connection is blocked) every
``interval`` seconds, and learns the broker's reason ("low on memory") from aiormq's
own log record of the ``connection.blocked`` frame (``low on memory``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from aio_pika.abc import AbstractConnection

log = logging.getLogger("rabbitq.worker")

CHECK_INTERVAL = 0.5
# How long ready() may take before the connection counts as blocked.
_PROBE = 0.05
_UNKNOWN = "resource alarm"


_BLOCKED = "Connection %r was blocked by: %r"
_UNBLOCKED = "Connection %r was unblocked"


class _ReasonFilter(logging.Filter):
    """Remembers the reason of the last ``connection.blocked`` aiormq logged, and lets
    through only what the logger let through before (``floor``) plus those two lines."""

    def __init__(self) -> None:
        super().__init__()
        self.reason: str | None = None
        self.floor = logging.NOTSET

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg == _BLOCKED and isinstance(record.args, tuple):
            self.reason = str(record.args[-1])
        return record.levelno >= self.floor or record.msg in (_BLOCKED, _UNBLOCKED)


_reasons = _ReasonFilter()


def _install() -> None:
    """Hear aiormq's ``connection.blocked`` log line even where its log is quieted
    (``rabbitq worker`` shows only its errors): the logger is opened to WARNING and the
    filter keeps every other record out, as before."""
    logger = logging.getLogger("aiormq.connection")
    if _reasons in logger.filters:
        return
    _reasons.floor = logger.getEffectiveLevel()
    logger.addFilter(_reasons)
    if _reasons.floor > logging.WARNING:
        logger.setLevel(logging.WARNING)


def describe(reason: str | None) -> str:
    """The line for ``/readyz`` and the log: ``broker blocked: memory alarm``."""
    text = (reason or _UNKNOWN).lower()
    if "memory" in text:
        return "broker blocked: memory alarm"
    if "disk" in text:
        return "broker blocked: disk alarm"
    return f"broker blocked: {reason or _UNKNOWN}"


async def is_blocked(connection: AbstractConnection | None) -> bool:
    """True if the connection is up and the broker blocks it."""
    transport = None if connection is None else connection.transport
    if transport is None or transport.connection.is_closed:
        return False
    try:
        await asyncio.wait_for(transport.connection.ready(), _PROBE)
    except TimeoutError:
        return True
    return False


class BlockedWatch:
    """Calls ``changed(description)`` when the connection becomes blocked and
    ``changed(None)`` when it is unblocked again."""

    def __init__(self, changed: Callable[[str | None], None]) -> None:
        self._changed = changed
        self.blocked: str | None = None
        _install()

    async def run(
        self,
        connection: Callable[[], AbstractConnection | None],
        interval: float = CHECK_INTERVAL,
    ) -> None:
        while True:
            now = describe(_reasons.reason) if await is_blocked(connection()) else None
            if now != self.blocked:
                self.blocked = now
                if now:
                    log.warning("%s: copies and acks wait until the alarm clears", now)
                else:
                    log.warning("broker unblocked: the resource alarm cleared")
                self._changed(now)
            await asyncio.sleep(interval)
