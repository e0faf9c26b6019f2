"""A lazily opened psycopg connection pool, shared by the PostgreSQL store and outbox.

Connections are in autocommit mode (each store statement is its own transaction);
``conn.transaction()`` opens an explicit one. A connection is checked before it is lent,
so a cut connection is replaced instead of failing the next claim; an outage that
persists becomes :class:`~rabbitq.effects.store.StoreUnavailable` after ``timeout``.
The check is rabbitq's rather than the pool's, so that a transaction's ``BEGIN`` can be
the check (:meth:`Database.connection` with ``begin=True``): one round trip, not two.

Callers beyond ``pool_size`` queue for a connection (for at most ``timeout``).
:meth:`Database.close` while callers use the pool or wait for it (a status writer's
flush beside 300 status reads) leaves it to the last of them to close: closing it under
them failed them all (``the pool ... is closed``). A pool that gives no
connection in time says why in its one line: the error of one direct connect when it
holds none (``database "payments" does not exist``, connection refused), else that all
its connections were busy; psycopg's own words are only in the pool's warnings.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import psycopg
from psycopg import sql
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from ..settings import redact_url
from .schema import lock_id
from .store import StoreUnavailable

Conn = psycopg.AsyncConnection[Any]
DEFAULT_POOL_SIZE = 10
DEFAULT_CONNECT_TIMEOUT = 5.0
CHECK_RETRY = 0.05  # seconds between two connections that failed their check
# Errors of the database link itself (not of a statement's content).
LINK_ERRORS = (psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout, OSError)


class Database:
    """One pool for ``dsn``; ``schema`` statements run once, on first use."""

    def __init__(
        self,
        dsn: str,
        *,
        schema: Sequence[sql.Composed],
        schema_name: str,
        pool_size: int = DEFAULT_POOL_SIZE,
        timeout: float = DEFAULT_CONNECT_TIMEOUT,
    ) -> None:
        self.dsn = dsn
        self.timeout = timeout
        self._schema = list(schema)
        self._schema_name = schema_name
        self._pool_size = pool_size
        self._pool: AsyncConnectionPool[Conn] | None = None
        self._lock: asyncio.Lock | None = None
        self._schema_ready = False
        self._users = 0  # callers holding or waiting for a pooled connection
        self._close_when_idle = False

    def __repr__(self) -> str:
        return f"Database({redact_url(self.dsn)!r})"

    async def open(self) -> None:
        """Open the pool and create the schema if it is missing (idempotent)."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._pool is None:
                pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
                    self.dsn,
                    min_size=1,
                    max_size=self._pool_size,
                    open=False,
                    timeout=self.timeout,
                    kwargs={"autocommit": True, "connect_timeout": max(1, int(self.timeout))},
                    name=self._schema_name,  # checked by connection(), not the pool
                )
                await pool.open(wait=False)
                self._pool = pool
            if not self._schema_ready:
                await self.create_schema()

    async def create_schema(self) -> None:
        """Run the schema statements in one transaction under an advisory lock."""
        assert self._pool is not None
        try:
            async with self._pool.connection() as conn, conn.transaction():
                await conn.execute(
                    "SELECT pg_advisory_xact_lock(%s)", (lock_id(self._schema_name),)
                )
                for statement in self._schema:
                    await conn.execute(statement)
        except LINK_ERRORS as exc:
            raise await self.unavailable(exc) from exc
        self._schema_ready = True

    async def close(self) -> None:
        """Close the pool (idempotent; opened again on next use). While callers use it
        or wait for it, the last of them closes it."""
        if self._users:
            self._close_when_idle = True
            return
        self._close_when_idle = False
        pool, self._pool = self._pool, None
        self._schema_ready = False
        if pool is not None:
            await pool.close()

    async def connect(self) -> Conn:
        """A new autocommit connection of the caller's own, outside the pool (the schema
        created first); an unreachable database is :class:`StoreUnavailable`."""
        if not self._schema_ready:
            await self.open()
        try:
            return await psycopg.AsyncConnection.connect(
                self.dsn, autocommit=True, connect_timeout=max(1, int(self.timeout))
            )
        except LINK_ERRORS as exc:
            raise await self.unavailable(exc) from exc

    async def unavailable(self, exc: BaseException) -> StoreUnavailable:
        """The :class:`StoreUnavailable` for ``exc``, in one line; for a pool's timeout,
        with its cause (:func:`why_no_connection`)."""
        why = await self.why_no_connection() if isinstance(exc, PoolTimeout) else None
        return StoreUnavailable(f"{self!r} is unavailable: {one_line(why or str(exc))}")

    async def why_no_connection(self) -> str | None:
        """Why the pool gave no connection within ``timeout``: with none open, the error
        of one direct connect (None if that one succeeds); else that all were busy."""
        pool = self._pool
        if pool is not None and pool.get_stats().get("pool_size", 0) > 0:
            return (
                f"all {pool.max_size} connections of its pool were busy for"
                f" {self.timeout:g}s (more callers than pool_size, or a slow database)"
            )
        try:
            conn = await psycopg.AsyncConnection.connect(
                self.dsn, autocommit=True, connect_timeout=max(1, int(self.timeout))
            )
        except LINK_ERRORS as exc:
            return f"cannot connect: {exc}"
        await conn.close()
        return None

    @contextlib.asynccontextmanager
    async def connection(self, *, begin: bool = False) -> AsyncIterator[Conn]:
        """A pooled connection, checked; with ``begin``, in a transaction that the caller
        ends (``COMMIT`` or ``ROLLBACK``; one left open is rolled back by the pool). An
        unreachable database is :class:`StoreUnavailable`."""
        self._users += 1
        try:
            if not self._schema_ready:
                await self.open()
            pool = self._pool
            assert pool is not None
            conn = await self._checked(pool, "BEGIN" if begin else "")
            try:
                yield conn
            finally:
                await pool.putconn(conn)
        except LINK_ERRORS as exc:
            raise await self.unavailable(exc) from exc
        finally:
            self._users -= 1
            if not self._users and self._close_when_idle:
                await self.close()

    async def _checked(self, pool: AsyncConnectionPool[Conn], first: str) -> Conn:
        """A connection of ``pool`` on which ``first`` ran (the empty statement the pool's
        own check sends, or ``BEGIN``). One that fails it goes back (the pool replaces a
        broken connection) and another is tried, until ``timeout``: what the pool's
        check loop does, with the check doing a transaction's first step as well."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        while True:
            conn = await pool.getconn(timeout=max(0.0, deadline - loop.time()))
            try:
                await conn.execute(first)
                return conn
            except LINK_ERRORS:
                await pool.putconn(conn)
                if loop.time() >= deadline:
                    raise
            except BaseException:
                await pool.putconn(conn)
                raise
            await asyncio.sleep(CHECK_RETRY)


def one_line(text: str) -> str:
    """``text`` on one line: psycopg's errors give a line per address tried (pure)."""
    return "; ".join(" ".join(line.split()) for line in text.splitlines() if line.strip())
