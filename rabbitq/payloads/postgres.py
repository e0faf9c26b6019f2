"""Large payloads in PostgreSQL: :class:`PostgresBlobs`, one row per blob in
``<prefix>blobs`` (``bytea``; PostgreSQL stores it out of line, compressed if it can)."""

from __future__ import annotations

from datetime import datetime, timedelta

from psycopg import sql

from ..effects.database import DEFAULT_POOL_SIZE, Database
from ..effects.location import DEFAULT_PREFIX, check_prefix
from ..errors import ConfigurationError
from .reference import TOMBSTONE_FOR, BlobRef, check_orphan_after
from .store import Found, State, Swept

DEFAULT_ABOVE = 256 * 1024
# PostgreSQL's bytea holds at most 1 GB; a larger body is refused at publish.
MAX_SIZE = 1024**3 - 1


class PostgresBlobs:
    """Keeps bodies above ``above`` bytes (default 256 KiB) in the table
    ``<prefix>blobs`` of the database at ``dsn``, created on first use.
    ``orphan_after``: how long after its message was due an upload never confirmed is
    kept before :meth:`sweep` deletes it (default 24 h)."""

    def __init__(
        self,
        dsn: str,
        *,
        above: int = DEFAULT_ABOVE,
        prefix: str = DEFAULT_PREFIX,
        orphan_after: float | timedelta | None = None,
        pool_size: int = DEFAULT_POOL_SIZE,
        timeout: float = 30.0,
    ) -> None:
        if not isinstance(above, int) or above < 0:
            raise ConfigurationError(f"above must be a size in bytes, not {above!r}")
        self.above = above
        self.orphan_after = check_orphan_after(orphan_after)
        self.table = check_prefix(prefix) + "blobs"
        t = sql.Identifier(self.table)
        self._t = t
        self.db = Database(
            dsn,
            schema=[
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} ("
                    " id text PRIMARY KEY,"
                    " state text NOT NULL CHECK (state IN ('pending', 'sent', 'done')),"
                    " size bigint NOT NULL,"
                    " data bytea,"
                    " created_at timestamptz NOT NULL DEFAULT now(),"
                    " sweep_after timestamptz NOT NULL)"
                ).format(t),
                sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (sweep_after) WHERE state <> 'sent'")
                .format(sql.Identifier(self.table + "_sweep"), t),
            ],
            schema_name=self.table,
            pool_size=pool_size,
            timeout=timeout,
        )

    def __repr__(self) -> str:
        return f"PostgresBlobs({self.table!r}, above={self.above})"

    async def put(self, ref: BlobRef, data: bytes, sweep_after: datetime) -> None:
        if len(data) > MAX_SIZE:
            raise ConfigurationError(f"a body of {len(data)} bytes is above bytea's 1 GB")
        async with self.db.connection() as conn:
            await conn.execute(
                sql.SQL(
                    "INSERT INTO {} (id, state, size, data, sweep_after)"
                    " VALUES (%s, 'pending', %s, %s, %s) ON CONFLICT (id) DO NOTHING"
                ).format(self._t),
                (ref.id, ref.size, data, sweep_after),
            )

    async def renew(self, blob_id: str, sweep_after: datetime) -> None:
        async with self.db.connection() as conn:
            await conn.execute(
                sql.SQL(
                    "UPDATE {} SET sweep_after = GREATEST(sweep_after, %s)"
                    " WHERE id = %s AND state = 'pending'"
                ).format(self._t),
                (sweep_after, blob_id),
            )

    async def sent(self, blob_id: str) -> None:
        async with self.db.connection() as conn:
            await conn.execute(
                sql.SQL("UPDATE {} SET state = 'sent' WHERE id = %s AND state = 'pending'")
                .format(self._t),
                (blob_id,),
            )

    async def get(self, blob_id: str) -> Found | None:
        async with self.db.connection() as conn:
            cur = await conn.execute(
                sql.SQL("SELECT state, data FROM {} WHERE id = %s").format(self._t), (blob_id,)
            )
            row = await cur.fetchone()
        if row is None:
            return None
        state: State = row[0]
        return Found(state, None if row[1] is None else bytes(row[1]))

    async def done(self, blob_id: str) -> None:
        async with self.db.connection() as conn:
            await conn.execute(
                sql.SQL(
                    "UPDATE {} SET state = 'done', data = NULL,"
                    " sweep_after = now() + make_interval(secs => %s) WHERE id = %s"
                ).format(self._t),
                (TOMBSTONE_FOR.total_seconds(), blob_id),
            )

    async def delete(self, blob_ids: list[str]) -> int:
        if not blob_ids:
            return 0
        async with self.db.connection() as conn:
            cur = await conn.execute(
                sql.SQL("DELETE FROM {} WHERE id = ANY(%s)").format(self._t), (blob_ids,)
            )
            return cur.rowcount

    async def sweep(self) -> Swept:
        async with self.db.connection() as conn:
            cur = await conn.execute(
                sql.SQL(
                    "DELETE FROM {} WHERE state <> 'sent' AND sweep_after < now()"
                    " RETURNING state"
                ).format(self._t)
            )
            states = [row[0] for row in await cur.fetchall()]
        return Swept(orphans=states.count("pending"), tombstones=states.count("done"))

    async def close(self) -> None:
        await self.db.close()
