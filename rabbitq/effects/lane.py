"""A connection of its own for one kind of a store's group commits (claims, done marks).

A statement on a connection borrowed from the pool pays the checkout and the pool's check
(an empty query: one more round trip) every time: about 290 us of the worker's CPU per
statement on this machine, against about 115 us on a connection kept open. A batcher
runs one flush at a time, so it can keep one connection, a :class:`Lane`.

The pool's check is replaced by one retry: a statement that fails on a connection that
had worked before (the server cut it while it was idle, a restart) is sent once more on a
new connection; one that fails on a new connection is an outage
(:class:`~rabbitq.effects.store.StoreUnavailable`: a failed attempt, as before). Sending
a batch statement twice is safe: each is idempotent for its own tokens (a claim that
finds its own token holds the lease, a done mark that finds its own done row succeeded,
a release that finds nothing to delete was done), so a statement that did commit before
the cut answers the same the second time.
"""

from __future__ import annotations

from typing import Any

from psycopg import sql

from .database import LINK_ERRORS, Conn, Database


class Lane:
    """One autocommit connection to ``db``'s database, opened on first use, for one
    statement at a time."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._conn: Conn | None = None

    async def fetch(self, query: sql.Composed, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        """The rows of ``query`` (none for a statement without), retried once on a new
        connection if the one kept had gone bad (see the module docstring)."""
        while True:
            fresh = self._conn is None
            if self._conn is None:
                self._conn = await self.db.connect()
            conn = self._conn
            try:
                cur = await conn.execute(query, params)
                return await cur.fetchall() if cur.description is not None else []
            except LINK_ERRORS:
                if not conn.closed:  # the statement failed, not the link: the caller's
                    raise
                self._conn = None
                await _discard(conn)
                if fresh:
                    raise

    async def close(self) -> None:
        """Close the connection (idempotent)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            await _discard(conn)


async def _discard(conn: Conn) -> None:
    try:
        await conn.close()
    except LINK_ERRORS:
        pass  # already gone
