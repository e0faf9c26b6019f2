"""``PostgresKeys``: unique and debounce keys in PostgreSQL, beside the app's other
tables (same database, same prefix).

One table, ``<prefix>publish_keys (key, message_id, pending, pending_until, expires_at)``,
the key prefixed by its kind (``u:`` unique, ``d:`` debounce). Taking a unique key is one
``INSERT ... ON CONFLICT DO UPDATE ... WHERE`` (no row, or an expired one): of two
publishers racing, exactly one gets the row back. A debounced delivery's check is one
statement too (a data-modifying CTE: a delivered pending message made the latest, then
read). Every statement is its own autocommit transaction. Rows past ``expires_at`` count
as absent and are deleted, 1,000 at a time, at most once a minute.
"""

from __future__ import annotations

import time
from typing import Any

from psycopg import sql

from ..effects.database import LINK_ERRORS, Database
from ..effects.location import PostgresLocation
from ..effects.store import StoreUnavailable
from ..settings import redact_url
from .store import decide

CLEANUP_INTERVAL = 60.0
_SECS = "now() + make_interval(secs => %(s)s)"
_TAKE = (
    "INSERT INTO {t} AS k (key, message_id, expires_at) VALUES (%(k)s, %(m)s, " + _SECS + ")"
    " ON CONFLICT (key) DO UPDATE SET message_id = EXCLUDED.message_id,"
    " expires_at = EXCLUDED.expires_at"
    " WHERE k.expires_at < now() RETURNING 1"
)
_HOLDER = "SELECT message_id FROM {t} WHERE key = %(k)s AND expires_at >= now()"
_HOLD = "UPDATE {t} SET expires_at = " + _SECS + " WHERE key = %(k)s AND message_id = %(m)s"
_RELEASE = "DELETE FROM {t} WHERE key = %(k)s AND message_id = %(m)s"
_PROPOSE = (
    "INSERT INTO {t} AS k (key, pending, pending_until, expires_at) VALUES (%(k)s, %(m)s,"
    " now() + make_interval(secs => %(lease)s), " + _SECS + ")"
    " ON CONFLICT (key) DO UPDATE SET pending = EXCLUDED.pending,"
    " pending_until = EXCLUDED.pending_until, expires_at = EXCLUDED.expires_at,"
    " message_id = CASE WHEN k.expires_at < now() THEN NULL ELSE k.message_id END"
)
_COMMIT = (
    "INSERT INTO {t} AS k (key, message_id, expires_at) VALUES (%(k)s, %(m)s, " + _SECS + ")"
    " ON CONFLICT (key) DO UPDATE SET message_id = EXCLUDED.message_id,"
    " expires_at = EXCLUDED.expires_at,"
    " pending = CASE WHEN k.pending = EXCLUDED.message_id THEN NULL ELSE k.pending END,"
    " pending_until = CASE WHEN k.pending = EXCLUDED.message_id THEN NULL"
    " ELSE k.pending_until END"
)
_WITHDRAW = (
    "UPDATE {t} SET pending = NULL, pending_until = NULL WHERE key = %(k)s AND pending = %(m)s"
)
_CHECK = (
    "WITH p AS (UPDATE {t} SET message_id = pending, pending = NULL, pending_until = NULL"
    " WHERE key = %(k)s AND pending = %(m)s AND expires_at >= now() RETURNING message_id)"
    " SELECT message_id, false FROM p UNION ALL"
    " SELECT message_id, pending IS NOT NULL AND pending_until > now() FROM {t}"
    " WHERE key = %(k)s AND expires_at >= now() AND NOT EXISTS (SELECT 1 FROM p)"
)
_FINISH = (
    "WITH d AS (DELETE FROM {t} WHERE key = %(k)s AND message_id = %(m)s"
    " AND (pending IS NULL OR pending_until < now()) RETURNING 1)"
    " UPDATE {t} SET message_id = NULL WHERE key = %(k)s AND message_id = %(m)s"
    " AND NOT EXISTS (SELECT 1 FROM d)"
)
_CLEANUP = (
    "DELETE FROM {t} WHERE ctid IN (SELECT ctid FROM {t} WHERE expires_at < now()"
    " LIMIT 1000 FOR UPDATE SKIP LOCKED)"
)


def _schema(table: sql.Identifier, index: sql.Identifier) -> list[sql.Composed]:
    return [
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (key text PRIMARY KEY, message_id text,"
            " pending text, pending_until timestamptz, expires_at timestamptz NOT NULL)"
        ).format(table),
        sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (expires_at)").format(index, table),
    ]


class PostgresKeys:
    """Unique and debounce keys in the table ``<prefix>publish_keys``."""

    def __init__(self, location: PostgresLocation, *, pool_size: int = 4) -> None:
        self.location = location
        name = location.prefix + "publish_keys"
        self._table = sql.Identifier(name)
        self.db = Database(
            location.dsn,
            schema=_schema(self._table, sql.Identifier(name + "_expires")),
            schema_name=name,
            pool_size=pool_size,
            timeout=location.timeout,
        )
        self._cleaned = time.monotonic()

    def __repr__(self) -> str:
        where = self.location
        return f"PostgresKeys({redact_url(where.dsn)!r}, prefix={where.prefix!r})"

    async def _run(self, query: str, **params: Any) -> list[Any]:
        statement = sql.SQL(query).format(t=self._table)
        async with self.db.connection() as conn:
            try:
                cur = await conn.execute(statement, params)
                rows = await cur.fetchall() if cur.description else []
                if time.monotonic() - self._cleaned >= CLEANUP_INTERVAL:
                    self._cleaned = time.monotonic()
                    cleanup = sql.SQL(_CLEANUP).format(t=self._table)
                    await conn.execute(cleanup)
            except LINK_ERRORS as exc:
                raise StoreUnavailable(f"{self!r}: {exc}") from exc
        return rows

    async def take(self, key: str, message_id: str, lease: float) -> str | None:
        for _ in range(5):  # a holder gone between the two statements: try again
            if await self._run(_TAKE, k="u:" + key, m=message_id, s=lease):
                return None
            rows = await self._run(_HOLDER, k="u:" + key)
            if rows and rows[0][0] is not None:
                return str(rows[0][0])
        raise StoreUnavailable(f"{self!r}: unique key {key!r} changed hands five times")

    async def hold(self, key: str, message_id: str, seconds: float) -> None:
        await self._run(_HOLD, k="u:" + key, m=message_id, s=seconds)

    async def release(self, key: str, message_id: str) -> None:
        await self._run(_RELEASE, k="u:" + key, m=message_id)

    async def propose(self, key: str, message_id: str, lease: float) -> str:
        keep = self.location.retention
        await self._run(_PROPOSE, k="d:" + key, m=message_id, lease=lease, s=keep)
        return ""  # PostgreSQL keeps what it committed: no epoch to carry

    async def commit(self, key: str, message_id: str) -> None:
        await self._run(_COMMIT, k="d:" + key, m=message_id, s=self.location.retention)

    async def withdraw(self, key: str, message_id: str) -> None:
        await self._run(_WITHDRAW, k="d:" + key, m=message_id)

    async def check(self, key: str, message_id: str, published_in: str | None = None) -> str:
        rows = await self._run(_CHECK, k="d:" + key, m=message_id)
        latest, waiting = (rows[0][0], bool(rows[0][1])) if rows else (None, False)
        return decide(latest, waiting, message_id)

    async def finish(self, key: str, message_id: str) -> None:
        await self._run(_FINISH, k="d:" + key, m=message_id)

    async def close(self) -> None:
        await self.db.close()
