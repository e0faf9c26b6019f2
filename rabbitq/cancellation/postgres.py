"""``PostgresCancels``: cancellations in ``<prefix>cancellations`` (one row per message
id, with its expiry), beside the app's other PostgreSQL stores.

A lookup is one keyed ``SELECT ... WHERE message_id = ANY(...)`` over the primary key
for every delivery of one window (the stage coalesces them); each lookup in
flight has a connection of its own (a :class:`~rabbitq.effects.lane.Lane`: no pool
checkout per lookup). Expired rows are deleted by the next cancel, a bounded batch at a time.
"""

from __future__ import annotations

from collections.abc import Sequence

from psycopg import sql

from ..effects.database import LINK_ERRORS, Database
from ..effects.lane import Lane
from ..effects.location import PostgresLocation
from ..effects.store import StoreUnavailable
from ..settings import redact_url
from .model import KEEP

CLEANUP_BATCH = 1000


class PostgresCancels:
    """The cancellations of the database at ``location``."""

    def __init__(self, location: PostgresLocation, keep: float = KEEP) -> None:
        self.location = location
        self.table = location.prefix + "cancellations"
        self.keep = keep
        t = sql.Identifier(self.table)
        self.db = Database(
            location.dsn,
            schema=[
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} (message_id text PRIMARY KEY,"
                    " cancelled_at timestamptz NOT NULL DEFAULT now(),"
                    " expires_at timestamptz NOT NULL)"
                ).format(t),
                sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (expires_at)").format(
                    sql.Identifier(self.table + "_expires"), t
                ),
            ],
            schema_name=self.table,
            pool_size=2,
            timeout=location.timeout,
        )
        # One statement at a time per Lane: a lane per lookup in flight (the stage's two
        # batches and its poll), kept for the next.
        self._lanes: list[Lane] = []
        self._free: list[Lane] = []
        self._add = sql.SQL(
            "INSERT INTO {t} (message_id, expires_at)"
            " SELECT unnest(%(ids)s::text[]), now() + make_interval(secs => %(keep)s)"
            " ON CONFLICT (message_id) DO UPDATE SET expires_at = EXCLUDED.expires_at"
        ).format(t=t)
        self._which = sql.SQL(
            "SELECT message_id FROM {t} WHERE message_id = ANY(%(ids)s) AND expires_at > now()"
        ).format(t=t)
        self._clean = sql.SQL(
            "DELETE FROM {t} WHERE message_id IN (SELECT message_id FROM {t}"
            " WHERE expires_at < now() LIMIT %(limit)s FOR UPDATE SKIP LOCKED)"
        ).format(t=t)

    def __repr__(self) -> str:
        return f"PostgresCancels({redact_url(self.location.dsn)!r}, table={self.table!r})"

    async def add(self, message_ids: Sequence[str]) -> None:
        try:
            async with self.db.connection() as conn, conn.transaction():
                ids = sorted(set(message_ids))  # one order for every writer: no deadlock
                await conn.execute(self._add, {"ids": ids, "keep": self.keep})
                await conn.execute(self._clean, {"limit": CLEANUP_BATCH})
        except LINK_ERRORS as exc:
            raise StoreUnavailable(f"cannot record cancellations in {self!r}: {exc}") from exc

    async def durable(self) -> bool:
        """PostgreSQL keeps what it committed: a cancellation outlives a restart."""
        return True

    async def which(self, message_ids: Sequence[str]) -> set[str]:
        try:
            lane = self._free.pop() if self._free else self._new_lane()
            try:
                rows = await lane.fetch(self._which, {"ids": list(message_ids)})
            finally:
                self._free.append(lane)
        except LINK_ERRORS as exc:
            raise StoreUnavailable(f"{self!r}: {exc}") from exc
        return {str(row[0]) for row in rows}

    def _new_lane(self) -> Lane:
        lane = Lane(self.db)
        self._lanes.append(lane)
        return lane

    async def close(self) -> None:
        lanes, self._lanes, self._free = self._lanes, [], []
        for lane in lanes:
            await lane.close()
        await self.db.close()
