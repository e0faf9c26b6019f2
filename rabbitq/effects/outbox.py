"""``Outbox``: messages written to a PostgreSQL table in the caller's transaction.

A service that changes its database and must announce it cannot do both atomically
with a broker. With an outbox it does not have to: ``await outbox.publish(conn, msg)``
inserts a row in the same transaction as the change, and the relay
(:mod:`rabbitq.effects.relay`, ``rabbitq outbox relay MODULE:APP``) publishes pending
rows with confirms and marks them sent. Each row keeps its ``message_id``, so a row
published twice (the relay died between the confirm and the mark) arrives as a duplicate
that an idempotent consumer recognises.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from psycopg.types.json import Jsonb

from .._amqp.headers import KEY_ID
from ..message import Message, encode
from ..settings import TLS, redact_url
from .database import DEFAULT_CONNECT_TIMEOUT, DEFAULT_POOL_SIZE, Conn, Database
from .location import DEFAULT_PREFIX, PostgresLocation, check_prefix
from .schema import OutboxSql

DEFAULT_BATCH = 200
DEFAULT_POLL_INTERVAL = 0.2
DEFAULT_KEEP_SENT = 24 * 3600.0  # seconds sent rows are kept before they are purged


@dataclass(frozen=True, slots=True)
class OutboxCounts:
    """What the relay reports: rows not yet sent, the age in seconds of the oldest, and
    how many of them failed at least once (unroutable, refused: each in its backoff)."""

    pending: int
    oldest_age: float
    failing: int


class OutboxApp(Protocol):
    """What an outbox needs of its :class:`~rabbitq.App` (a protocol: no import cycle)."""

    exchange: str
    outbox: Outbox | None
    tls: TLS | None

    def resolved_url(self, override: str | None = None) -> str: ...


class Outbox:
    """The outbox table ``<prefix>outbox`` in the database at ``dsn``, for ``app``.

    Rows are published to ``app``'s exchange with the message's type as routing key.
    Constructing an Outbox for an app registers it as ``app.outbox`` (unless the app
    has one), which is where ``rabbitq outbox relay MODULE:APP`` and transactional
    follow-ups (``ctx.publish`` inside ``ctx.transaction()``) find it.
    ``batch`` rows are relayed at a time, ``poll_interval`` seconds apart when idle;
    sent rows are kept ``keep_sent`` seconds. ``location`` is the database and prefix it
    shares with the other PostgreSQL stores (:mod:`.location`).
    """

    def __init__(
        self,
        dsn: str,
        *,
        app: OutboxApp,
        prefix: str = DEFAULT_PREFIX,
        batch: int = DEFAULT_BATCH,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        keep_sent: float = DEFAULT_KEEP_SENT,
        pool_size: int = DEFAULT_POOL_SIZE,
    ) -> None:
        self.app = app
        self.sql = OutboxSql(check_prefix(prefix) + "outbox")
        self.location = PostgresLocation(dsn, prefix, timeout=DEFAULT_CONNECT_TIMEOUT)
        self.db = Database(
            dsn, schema=self.sql.create(), schema_name=self.sql.table, pool_size=pool_size
        )
        self.batch = batch
        self.poll_interval = poll_interval
        self.keep_sent = keep_sent
        if app.outbox is None:
            app.outbox = self

    def __repr__(self) -> str:
        return f"Outbox({redact_url(self.db.dsn)!r}, table={self.sql.table!r})"

    @property
    def dsn(self) -> str:
        """The database's connection string."""
        return self.db.dsn

    async def open(self) -> None:
        """Create the table if it is missing (also done by the first publish)."""
        await self.db.open()

    async def close(self) -> None:
        """Close the outbox's own pool (the caller's connections are the caller's)."""
        await self.db.close()

    async def publish(
        self,
        conn: Conn,
        message: Message,
        *,
        key: str | None = None,
        message_id: str | None = None,
        correlation_id: str | None = None,
        headers: Mapping[str, Any] | None = None,
    ) -> str:
        """Insert ``message`` as a pending row using ``conn`` (in its transaction, if
        one is open); return its ``message_id``.

        Rows with the same ``key`` are published in the order they were inserted;
        rows without a key in any order. Nothing is sent if the transaction rolls back.
        """
        await self.db.open()  # the table exists before the caller's insert
        mid = message_id or uuid.uuid4().hex
        body, stored = encode(message), dict(headers) if headers else None
        cipher = _cipher(self.app)
        if cipher is not None:  # an encrypted app's rows hold ciphertext (docs/privacy.md)
            key_id, body = cipher.seal_body(body, mid, message.type_name())
            stored = {**(stored or {}), KEY_ID: key_id}
            cipher.seal_headers(stored, mid)  # a chain's later steps, a chord's callback
        await conn.execute(
            self.sql.insert(),
            {
                "exchange": self.app.exchange,
                "routing_key": message.type_name(),
                "message_id": mid,
                "type": message.type_name(),
                "body": body,
                "headers": Jsonb(stored) if stored else None,
                "correlation_id": correlation_id,
                "order_key": key,
            },
        )
        return mid

    async def stats(self) -> tuple[int, float]:
        """(pending rows, age in seconds of the oldest pending row)."""
        counts = await self.counts()
        return counts.pending, counts.oldest_age

    async def counts(self) -> OutboxCounts:
        """The pending rows, the oldest one's age, and how many of them failed."""
        async with self.db.connection() as conn:
            cur = await conn.execute(self.sql.stats())
            row = await cur.fetchone()
        assert row is not None
        return OutboxCounts(int(row[0]), float(row[1]), int(row[2]))

    async def drop(self) -> None:
        """Drop the table (for tests and uninstalling)."""
        async with self.db.connection() as conn:
            await conn.execute(self.sql.drop())


def _cipher(app: Any) -> Any:
    """The cipher of an encrypted app (its ``decrypt`` stage's,
    ``rabbitq.crypto.codec.Cipher``), else None: found, not imported (crypto sits above)."""
    for stage in getattr(app, "delivery_stages", ()):
        if getattr(stage, "name", None) == "decrypt":
            return stage.cipher
    return None
