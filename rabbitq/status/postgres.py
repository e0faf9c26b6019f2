"""``PostgresStatus``: status records as rows of ``<prefix>status`` in PostgreSQL.

A write is one ``INSERT ... SELECT FROM jsonb_to_recordset(...)`` for the whole batch,
sent as one JSON document (one round trip, one statement text whatever the batch's
size, and one ``orjson.dumps`` on the worker's event loop). Rows expire ``retention`` seconds
after they are written; expired rows are deleted in batches through the ``expires_at``
index, by the writer's task after a write at most every ``cleanup_interval`` seconds,
never on a message's path. Reads go through the ``message_id`` index; a workflow
group's through two partial indexes, ``(group_id, message_id)`` and ``(callback_of)``,
which hold only the rows of workflow messages (added in place to a table made before).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import orjson
from psycopg import sql

from ..effects.database import LINK_ERRORS, Database
from ..effects.location import DEFAULT_PREFIX, PostgresLocation, check_prefix
from ..effects.store import DEFAULT_RETENTION, StoreUnavailable, check_positive
from ..settings import redact_url
from .group import GroupRecords
from .model import Record

MAX_CALLBACKS = 100  # messages read as one group's callbacks, at most
DEFAULT_POOL_SIZE = 2  # the writer's task, and a reader (rabbitq status, the console)
DEFAULT_CLEANUP_INTERVAL = 60.0
CLEANUP_BATCH = 5000


@dataclass(frozen=True, slots=True)
class StatusSql:
    """The statements of the status table (pure)."""

    table: str

    def create(self) -> list[sql.Composed]:
        t = sql.Identifier(self.table)
        return [
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} ("
                " id bigserial PRIMARY KEY,"
                " message_id text NOT NULL,"
                " state text NOT NULL,"
                " at timestamptz NOT NULL,"
                " attempt integer,"
                " detail jsonb,"
                " group_id text,"
                " expires_at timestamptz NOT NULL,"
                " callback_of text)"
            ).format(t),
            sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS callback_of text").format(t),
            sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (message_id)").format(
                sql.Identifier(self.table + "_message"), t
            ),
            sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (expires_at)").format(
                sql.Identifier(self.table + "_expires"), t
            ),
            sql.SQL(
                "CREATE INDEX IF NOT EXISTS {} ON {} (group_id, message_id)"
                " WHERE group_id IS NOT NULL"
            ).format(sql.Identifier(self.table + "_group"), t),
            sql.SQL(
                "CREATE INDEX IF NOT EXISTS {} ON {} (callback_of) WHERE callback_of IS NOT NULL"
            ).format(sql.Identifier(self.table + "_callback"), t),
        ]

    def insert(self) -> sql.Composed:
        # The batch is one JSON array of records (orjson writes it in one call): the
        # cheapest form for the worker's event loop; PostgreSQL unpacks it.
        return sql.SQL(
            "INSERT INTO {} (message_id, state, at, attempt, detail, group_id, callback_of,"
            "  expires_at)"
            " SELECT message_id, state, to_timestamp(at), attempt, nullif(detail, '{{}}'),"
            "  group_id, callback_of, now() + make_interval(secs => %(keep)s)"
            " FROM jsonb_to_recordset(%(records)s::jsonb) AS r(message_id text, state text,"
            "  at float8, attempt int, detail jsonb, group_id text, callback_of text)"
        ).format(sql.Identifier(self.table))

    def select(self) -> sql.Composed:
        return sql.SQL(
            "SELECT state, extract(epoch FROM at)::float8, attempt, detail, group_id,"
            "  callback_of FROM {} WHERE message_id = %(m)s ORDER BY at, id"
        ).format(sql.Identifier(self.table))

    def select_ids(self) -> sql.Composed:
        """The distinct message ids starting with ``p`` (a LIKE pattern, escaped)."""
        return sql.SQL(
            "SELECT DISTINCT message_id FROM {} WHERE message_id LIKE %(p)s ESCAPE '\\'"
            " ORDER BY message_id LIMIT %(limit)s"
        ).format(sql.Identifier(self.table))

    def select_group(self) -> sql.Composed:
        """Every record of the first ``limit`` members (by id) of group ``g`` and of its
        callbacks, in any order (the fold orders them): the members and callbacks through
        the partial indexes, then all their records (a ``purged`` record has no group)."""
        return sql.SQL(
            "WITH m AS ("
            " (SELECT DISTINCT message_id FROM {t} WHERE group_id = %(g)s"
            "  ORDER BY message_id LIMIT %(limit)s)"
            " UNION (SELECT DISTINCT message_id FROM {t} WHERE callback_of = %(g)s"
            "  LIMIT %(callbacks)s))"
            " SELECT message_id, state, extract(epoch FROM at)::float8, attempt, detail,"
            "  group_id, callback_of FROM {t} WHERE message_id IN (SELECT message_id FROM m)"
        ).format(t=sql.Identifier(self.table))

    def count_group(self) -> sql.Composed:
        return sql.SQL(
            "SELECT count(DISTINCT message_id) FROM {} WHERE group_id = %(g)s"
        ).format(sql.Identifier(self.table))

    def cleanup(self) -> sql.Composed:
        t = sql.Identifier(self.table)
        return sql.SQL(
            "DELETE FROM {t} WHERE id IN (SELECT id FROM {t} WHERE expires_at < now()"
            " LIMIT %(limit)s FOR UPDATE SKIP LOCKED)"
        ).format(t=t)

    def drop(self) -> sql.Composed:
        return sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(self.table))


class PostgresStatus:
    """Keeps status records in ``<prefix>status`` of the database at ``dsn`` for
    ``retention`` seconds (default 7 days); the table is created on first use.
    ``location`` names its chord store (:mod:`rabbitq.effects.location`)."""

    def __init__(
        self,
        dsn: str,
        *,
        retention: float = DEFAULT_RETENTION,
        prefix: str = DEFAULT_PREFIX,
        pool_size: int = DEFAULT_POOL_SIZE,
        timeout: float = 5.0,
        cleanup_interval: float | None = DEFAULT_CLEANUP_INTERVAL,
    ) -> None:
        self.retention = check_positive("retention", retention)
        self.sql = StatusSql(check_prefix(prefix) + "status")
        self.location = PostgresLocation(dsn, prefix, self.retention, timeout)
        self.db = Database(
            dsn,
            schema=self.sql.create(),
            schema_name=self.sql.table,
            pool_size=pool_size,
            timeout=timeout,
        )
        self.cleanup_interval = cleanup_interval
        self._cleaned = time.monotonic()

    def __repr__(self) -> str:
        return f"PostgresStatus({redact_url(self.db.dsn)!r}, table={self.sql.table!r})"

    async def open(self) -> None:
        """Open the pool and create the table if it is missing (``rabbitq effects init``)."""
        await self.db.open()

    async def write(self, records: Sequence[Record]) -> None:
        """Insert ``records``: one statement; then delete expired rows if it is time."""
        params = {"keep": self.retention, "records": orjson.dumps(records).decode()}
        async with self.db.connection() as conn:
            try:
                await conn.execute(self.sql.insert(), params)
            except LINK_ERRORS as exc:
                raise StoreUnavailable(f"{self!r}: write failed: {exc}") from exc
        due = self.cleanup_interval is not None
        if due and time.monotonic() - self._cleaned >= (self.cleanup_interval or 0):
            self._cleaned = time.monotonic()
            await self.cleanup()

    async def read(self, message_id: str) -> list[Record]:
        """Every record kept for ``message_id``."""
        async with self.db.connection() as conn:
            cur = await conn.execute(self.sql.select(), {"m": message_id})
            rows = await cur.fetchall()
        return [
            Record(message_id, state, at, attempt, detail or {}, group_id, callback_of)
            for state, at, attempt, detail, group_id, callback_of in rows
        ]

    async def ids_starting_with(self, prefix: str, limit: int) -> list[str]:
        """At most ``limit`` message ids starting with ``prefix``, sorted."""
        pattern = "".join("\\" + c if c in "%_\\" else c for c in prefix) + "%"
        async with self.db.connection() as conn:
            cur = await conn.execute(self.sql.select_ids(), {"p": pattern, "limit": limit})
            rows = await cur.fetchall()
        return [message_id for (message_id,) in rows]

    async def read_group(self, group_id: str, limit: int) -> GroupRecords:
        """The records of the first ``limit`` members of ``group_id`` (by message id) and
        of its callbacks; the members are counted only when there may be more."""
        params = {"g": group_id, "limit": limit, "callbacks": MAX_CALLBACKS}
        async with self.db.connection() as conn:
            cur = await conn.execute(self.sql.select_group(), params)
            records = [Record(*row) for row in await cur.fetchall()]
            members = len({r.message_id for r in records if r.group_id == group_id})
            if members >= limit:
                cur = await conn.execute(self.sql.count_group(), {"g": group_id})
                row = await cur.fetchone()
                members = int(row[0]) if row else members
        for r in records:
            r.detail = r.detail or {}
        return GroupRecords(records, members)

    async def cleanup(self, *, limit: int = CLEANUP_BATCH) -> int:
        """Delete up to ``limit`` expired rows (through the index); return how many."""
        async with self.db.connection() as conn:
            cur = await conn.execute(self.sql.cleanup(), {"limit": limit})
            return cur.rowcount

    async def close(self) -> None:
        """Close the pool (opened again on next use)."""
        await self.db.close()

    async def drop(self) -> None:
        """Drop the table (for tests and uninstalling)."""
        async with self.db.connection() as conn:
            await conn.execute(self.sql.drop())
        await self.db.close()
