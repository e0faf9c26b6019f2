"""``PostgresBackend``: every PostgreSQL store of an app (idempotency keys, status
records, chord state and results, the outbox) from one database and one table prefix.

The tables are the ones each store makes for that prefix: ``<prefix>idempotency``,
``<prefix>status``, ``<prefix>chord_members``, ``<prefix>chord_claims``,
``<prefix>results``, ``<prefix>outbox`` (``rabbitq_...`` by default, as before). psycopg
is imported when a store is first asked for, not here: without the ``postgres`` extra
the backend says so when it is built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..effects.location import DEFAULT_PREFIX, DEFAULT_TIMEOUT, PostgresLocation, check_prefix
from ..effects.store import DEFAULT_RETENTION, check_positive
from ..settings import redact_url
from .extra import require

if TYPE_CHECKING:
    from ..effects.outbox import Outbox, OutboxApp
    from ..effects.postgres import PostgresStore
    from ..status.postgres import PostgresStatus
    from ..workflow.chords_pg import PostgresChords

DEFAULT_CLEANUP_INTERVAL = 60.0


class PostgresBackend:
    """The PostgreSQL stores of the database at ``dsn``, their tables named
    ``<prefix>...``; ``App(backend=PostgresBackend(dsn))`` uses them all.

    ``retention`` (seconds, default 7 days) is how long idempotency keys, status records
    and chord state are kept; ``timeout`` bounds connecting and waiting for a pooled
    connection; ``cleanup_interval`` (seconds, None: never) is how often expired keys
    and records are deleted. Each method answers the same store every time.
    """

    def __init__(
        self,
        dsn: str,
        *,
        prefix: str = DEFAULT_PREFIX,
        retention: float = DEFAULT_RETENTION,
        timeout: float = DEFAULT_TIMEOUT,
        cleanup_interval: float | None = DEFAULT_CLEANUP_INTERVAL,
    ) -> None:
        require("postgres", ("psycopg", "psycopg_pool"), "PostgresBackend")
        self.location = PostgresLocation(
            dsn,
            check_prefix(prefix),
            check_positive("retention", retention),
            check_positive("timeout", timeout),
        )
        self.cleanup_interval = cleanup_interval
        self._idempotency: PostgresStore | None = None
        self._status: PostgresStatus | None = None
        self._chords: PostgresChords | None = None

    def __repr__(self) -> str:
        where = self.location
        return f"PostgresBackend({redact_url(where.dsn)!r}, prefix={where.prefix!r})"

    def idempotency(self) -> PostgresStore:
        """The idempotency store: ``<prefix>idempotency``."""
        if self._idempotency is None:
            from ..effects.postgres import PostgresStore

            where = self.location
            self._idempotency = PostgresStore(
                where.dsn,
                prefix=where.prefix,
                retention=where.retention,
                timeout=where.timeout,
                cleanup_interval=self.cleanup_interval,
            )
        return self._idempotency

    def status(self) -> PostgresStatus:
        """The status store: ``<prefix>status``."""
        if self._status is None:
            from ..status.postgres import PostgresStatus

            where = self.location
            self._status = PostgresStatus(
                where.dsn,
                prefix=where.prefix,
                retention=where.retention,
                timeout=where.timeout,
                cleanup_interval=self.cleanup_interval,
            )
        return self._status

    def chords(self) -> PostgresChords:
        """The chord store: ``<prefix>chord_members``, ``<prefix>chord_claims``,
        ``<prefix>results`` (the one ``chord_store(self.status())`` makes)."""
        if self._chords is None:
            from ..workflow.chords_pg import PostgresChords

            where = self.location
            self._chords = PostgresChords(
                where.dsn, prefix=where.prefix, retention=where.retention, timeout=where.timeout
            )
        return self._chords

    def outbox(self, app: OutboxApp, **options: Any) -> Outbox:
        """A new outbox ``<prefix>outbox`` for ``app`` (registered as ``app.outbox``
        unless it has one); ``options`` are :class:`~rabbitq.effects.Outbox`'s
        (``batch``, ``poll_interval``, ``keep_sent``, ``pool_size``)."""
        from ..effects.outbox import Outbox

        return Outbox(self.location.dsn, app=app, prefix=self.location.prefix, **options)
