"""The registry of blocked keys (``on_dead="block"``): a durable queue in the broker,
``<queue>.blocked`` (per partition queue with ``App(partitions=N)``), that holds one
message per blocked key, so that a key stays blocked through a restart of its worker
and a partition moving to another process (docs/ordering.md, "Blocked keys").

- **Block**: a persistent message with the key and the dead message's id in its
  headers, published with a confirm *before* the dead message is settled.
- **Read**: the worker that becomes active for the queue reads the registry before its
  first ordered delivery goes (``basic.get`` until empty on a channel of its own, then
  closes the channel, which gives every message back, in order). It reads it again on a
  new consume channel (after a reconnect it may have been away while another process
  was active and blocked keys).
- **Unblock**: a replayed message of the key gets every message of the registry, acks
  those of its key, and closes the channel (giving the others back).

Only the active consumer of a single-active-consumer queue reads or writes its
registry, and a read holds the messages only for the time of one scan.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Protocol

import aio_pika
from aio_pika.abc import AbstractChannel, AbstractConnection

from .._amqp.partitions import KEY_HEADER

log = logging.getLogger("rabbitq.worker")

DEAD_HEADER = "rabbitq-dead"
"""The id of the dead message that blocked the key."""
MAX_SCAN = 100_000
"""Messages read at most in one scan (a registry holds one per blocked key)."""
RETRY_READ = 1.0
"""Seconds between two attempts to read a registry the broker would not give."""


def entry(message: aio_pika.abc.AbstractIncomingMessage) -> tuple[str, str] | None:
    """``(key, dead message id)`` of a registry message, or None if it is none (pure)."""
    headers = message.headers or {}
    key, dead = headers.get(KEY_HEADER), headers.get(DEAD_HEADER)
    if isinstance(key, bytes):
        key = key.decode("utf-8", "replace")
    if isinstance(dead, bytes):
        dead = dead.decode("utf-8", "replace")
    return (key, str(dead or "-")) if isinstance(key, str) else None


class Connected(Protocol):
    """What has the connection to reach the registry on (a worker)."""

    @property
    def connection(self) -> AbstractConnection | None: ...


class BlockedKeys:
    """The registry ``name`` of one queue, reached through ``owner``'s connection."""

    def __init__(self, name: str, owner: Connected) -> None:
        self.name = name
        self._owner = owner
        self._read_on: object = None  # the consume channel the last read was for
        self._lock = asyncio.Lock()

    def stale(self, channel: object) -> bool:
        """Has the registry not been read for deliveries of ``channel`` yet?"""
        return channel is None or channel is not self._read_on

    async def read(self, channel: object) -> dict[str, str] | None:
        """Every blocked key and its dead message's id, read for deliveries of
        ``channel`` (tried again every :data:`RETRY_READ` seconds until the broker
        answers: the deliveries wait, unacked, rather than run unblocked); None if
        another delivery read it for ``channel`` while this one waited for the lock
        (a second, later scan would only race the keys blocked since)."""
        async with self._lock:
            if not self.stale(channel):
                return None
            warned = False
            while True:
                try:
                    blocked = await self._scan(None)
                    self._read_on = channel
                    return blocked
                except Exception as exc:  # the connection is away: its deliveries go back
                    if not warned:
                        log.warning("could not read the blocked keys in %r: %s", self.name, exc)
                        warned = True
                    await asyncio.sleep(RETRY_READ)

    async def add(self, key: str, dead: str) -> bool:
        """Record ``key`` as blocked by message ``dead`` (confirmed); False if the
        broker would not take it (the key is then blocked in this process only)."""
        try:
            async with self._channel(confirms=True) as channel:
                await channel.default_exchange.publish(
                    aio_pika.Message(
                        b"",
                        headers={KEY_HEADER: key, DEAD_HEADER: dead},
                        delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                        message_id=f"blocked:{dead}",
                    ),
                    routing_key=self.name,
                    mandatory=True,
                )
            return True
        except Exception as exc:
            log.error(
                "key %r could not be recorded as blocked in %r (%s): it is blocked in this "
                "process only, and a restart would forget it", key, self.name, exc,
            )  # fmt: skip
            return False

    async def remove(self, key: str) -> None:
        """Take ``key``'s messages out of the registry (a replay unblocked it)."""
        try:
            async with self._lock:
                await self._scan(key)
        except Exception as exc:
            log.error(
                "key %r could not be taken out of %r (%s): after a restart it is blocked "
                "again until a message of it is replayed", key, self.name, exc,
            )  # fmt: skip

    async def _scan(self, drop: str | None) -> dict[str, str]:
        """Get every message of the registry; ack those of key ``drop``; the channel's
        close gives the others back, in their order."""
        blocked: dict[str, str] = {}
        async with self._channel(confirms=False) as channel:
            queue = await channel.get_queue(self.name, ensure=False)
            for _ in range(MAX_SCAN):
                message = await queue.get(no_ack=False, fail=False)
                if message is None:
                    break
                found = entry(message)
                if found is None:
                    continue  # not ours: left for the operator, given back at close
                if found[0] == drop:
                    await message.ack()
                else:
                    blocked.setdefault(found[0], found[1])
        return blocked

    @contextlib.asynccontextmanager
    async def _channel(self, *, confirms: bool) -> AsyncIterator[AbstractChannel]:
        connection = self._owner.connection
        if connection is None:
            raise ConnectionError("not connected")
        channel: AbstractChannel = await connection.channel(
            publisher_confirms=confirms, on_return_raises=confirms
        )
        try:
            yield channel
        finally:
            with contextlib.suppress(Exception):
                await channel.close()
