"""``PostgresChords``: chord state in PostgreSQL, beside a
:class:`~rabbitq.status.PostgresStatus` (same database, same prefix).

- ``<prefix>chord_members (group_id, idx, message_id, expires_at)``, primary key
  ``(group_id, idx)``. ``mark`` inserts (``ON CONFLICT DO NOTHING``) and then counts
  (through the key), in two autocommit statements: the count's snapshot is taken after
  its own insert committed, so of two members marked at once the later committer counts
  both (one statement's snapshot would miss the other's row: both could count one short);
- ``<prefix>chord_claims (group_id, kind, state, token, expires_at)``: ``busy`` with a
  lease, then ``sent``; kind ``shape``: what the id names (state ``shape``, the shape in
  ``token``), inserted once;
- ``<prefix>results (message_id, result jsonb, expires_at)``.

Tables are created on first use. Rows expire ``retention`` after they were written (a
chord must complete within it), and a mark deletes expired rows, 1,000 per table, at
most once a minute, through an index on ``expires_at``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from psycopg import sql

from ..effects.database import LINK_ERRORS, Database
from ..effects.location import PostgresLocation
from ..effects.store import StoreUnavailable
from ..settings import redact_url
from .wire import NEW, OTHER, SAME, SENT, SHAPE


def _schema(p: str) -> list[sql.Composed]:
    members, claims, results = (sql.Identifier(p + n) for n in _TABLES)
    return [
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (group_id text NOT NULL, idx integer NOT NULL,"
            " message_id text NOT NULL, expires_at timestamptz NOT NULL,"
            " PRIMARY KEY (group_id, idx))"
        ).format(members),
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (group_id text NOT NULL, kind text NOT NULL,"
            " state text NOT NULL, token text, expires_at timestamptz NOT NULL,"
            " PRIMARY KEY (group_id, kind))"
        ).format(claims),
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (message_id text PRIMARY KEY, result jsonb,"
            " expires_at timestamptz NOT NULL)"
        ).format(results),
        *(
            sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (expires_at)").format(
                sql.Identifier(p + n + "_expires"), sql.Identifier(p + n)
            )
            for n in _TABLES
        ),
    ]


_TABLES = ("chord_members", "chord_claims", "results")
CLEANUP_INTERVAL = 60.0  # seconds between two deletions of expired rows, at most
_KEEP = "now() + make_interval(secs => %(keep)s)"


class PostgresChords:
    """Chord counts, callback claims and results in tables named ``<prefix>...``."""

    def __init__(
        self,
        dsn: str,
        *,
        prefix: str = "rabbitq_",
        retention: float = 7 * 24 * 3600.0,
        pool_size: int = 4,
        timeout: float = 5.0,
    ) -> None:
        self.prefix = prefix
        self.retention = retention
        self.location = PostgresLocation(dsn, prefix, retention, timeout)
        self.db = Database(
            dsn,
            schema=_schema(prefix),
            schema_name=prefix + "chord_members",
            pool_size=pool_size,
            timeout=timeout,
        )
        self._members, self._claims, self._results = (sql.Identifier(prefix + n) for n in _TABLES)
        self._cleaned = time.monotonic()

    def __repr__(self) -> str:
        return f"PostgresChords({redact_url(self.db.dsn)!r}, prefix={self.prefix!r})"

    async def _run(self, *statements: tuple[sql.Composed, dict[str, Any]]) -> list[Any]:
        """Each statement in its own autocommit transaction; the last one's rows."""
        rows: list[Any] = []
        async with self.db.connection() as conn:
            try:
                for statement, params in statements:
                    cur = await conn.execute(statement, {"keep": self.retention, **params})
                    rows = await cur.fetchall() if cur.description else []
            except LINK_ERRORS as exc:
                raise StoreUnavailable(f"{self!r}: {exc}") from exc
        return rows

    async def put_result(self, message_id: str, result: bytes) -> None:
        q = sql.SQL(
            "INSERT INTO {t} (message_id, result, expires_at) VALUES (%(m)s, %(r)s::jsonb, "
            + _KEEP
            + ") ON CONFLICT (message_id) DO UPDATE SET result = EXCLUDED.result,"
            " expires_at = EXCLUDED.expires_at"
        ).format(t=self._results)
        await self._run((q, {"m": message_id, "r": result.decode()}))

    async def result(self, message_id: str) -> Any:
        q = sql.SQL("SELECT result FROM {} WHERE message_id = %(m)s").format(self._results)
        rows = await self._run((q, {"m": message_id}))
        return rows[0][0] if rows else None

    async def mark(self, group_id: str, index: int, message_id: str) -> int:
        insert = sql.SQL(
            "INSERT INTO {t} (group_id, idx, message_id, expires_at) VALUES (%(g)s, %(i)s, "
            "%(m)s, " + _KEEP + ") ON CONFLICT (group_id, idx) DO NOTHING"
        ).format(t=self._members)
        count = sql.SQL("SELECT count(*) FROM {t} WHERE group_id = %(g)s").format(
            t=self._members
        )
        params = {"g": group_id, "i": index, "m": message_id}
        rows = await self._run((insert, params), (count, params))
        if time.monotonic() - self._cleaned >= CLEANUP_INTERVAL:
            self._cleaned = time.monotonic()
            await self.cleanup()
        return int(rows[0][0])

    async def cleanup(self, limit: int = 1000) -> None:
        """Delete up to ``limit`` expired rows of each table (through their keys)."""
        for table in (self._members, self._claims, self._results):
            q = sql.SQL(
                "DELETE FROM {t} WHERE ctid IN (SELECT ctid FROM {t} WHERE expires_at < now()"
                " LIMIT %(limit)s FOR UPDATE SKIP LOCKED)"
            ).format(t=table)
            await self._run((q, {"limit": limit}))

    async def results(self, group_id: str) -> Sequence[tuple[int, str, Any]]:
        q = sql.SQL(
            "SELECT m.idx, m.message_id, r.result FROM {m} m LEFT JOIN {r} r"
            " ON r.message_id = m.message_id WHERE m.group_id = %(g)s ORDER BY m.idx"
        ).format(m=self._members, r=self._results)
        return [(i, mid, result) for i, mid, result in await self._run((q, {"g": group_id}))]

    async def register(self, group_id: str, shape: str) -> str:
        put = sql.SQL(
            "INSERT INTO {t} (group_id, kind, state, token, expires_at) VALUES (%(g)s, %(k)s,"
            " 'shape', %(s)s, " + _KEEP + ") ON CONFLICT (group_id, kind) DO UPDATE SET"
            " token = EXCLUDED.token, expires_at = EXCLUDED.expires_at"
            " WHERE {t}.expires_at < now()"  # expired, not yet deleted: the id is free
        ).format(t=self._claims)
        look = sql.SQL("SELECT token FROM {} WHERE group_id = %(g)s AND kind = %(k)s").format(
            self._claims
        )
        params = {"g": group_id, "k": SHAPE, "s": shape}
        rows = await self._run((put, params), (look, params))
        return str(rows[0][0]) if rows and rows[0][0] else shape

    async def claim(self, group_id: str, kind: str, token: str, lease: float) -> str:
        take = sql.SQL(
            "INSERT INTO {t} (group_id, kind, state, token, expires_at) VALUES (%(g)s, %(k)s,"
            " 'busy', %(tok)s, now() + make_interval(secs => %(lease)s))"
            " ON CONFLICT (group_id, kind) DO UPDATE SET token = EXCLUDED.token,"
            " expires_at = EXCLUDED.expires_at WHERE {t}.state = 'busy'"
            " AND ({t}.token = EXCLUDED.token OR {t}.expires_at < now()) RETURNING state"
        ).format(t=self._claims)
        look = sql.SQL(
            "SELECT state, token FROM {} WHERE group_id = %(g)s AND kind = %(k)s"
        ).format(self._claims)
        params = {"g": group_id, "k": kind, "tok": token, "lease": lease}
        if await self._run((take, params)):
            return NEW
        rows = await self._run((look, params))
        if rows and rows[0][0] == "sent":
            return SENT
        holder = str(rows[0][1]) if rows else ""  # (a row gone meanwhile: taken next time)
        same = holder.partition("/")[0] == token.partition("/")[0]
        return SAME if same else OTHER

    async def release(self, group_id: str, kind: str, token: str) -> None:
        q = sql.SQL(
            "DELETE FROM {} WHERE group_id = %(g)s AND kind = %(k)s AND state = 'busy'"
            " AND token = %(tok)s"
        ).format(self._claims)
        await self._run((q, {"g": group_id, "k": kind, "tok": token}))

    async def sent(self, group_id: str, kind: str) -> None:
        q = sql.SQL(
            "INSERT INTO {t} (group_id, kind, state, expires_at) VALUES (%(g)s, %(k)s, 'sent', "
            + _KEEP
            + ") ON CONFLICT (group_id, kind) DO UPDATE SET state = 'sent', token = NULL,"
            " expires_at = EXCLUDED.expires_at"
        ).format(t=self._claims)
        await self._run((q, {"g": group_id, "k": kind}))

    async def close(self) -> None:
        await self.db.close()
