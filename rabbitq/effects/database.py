"""A lazily opened psycopg connection pool, shared by the PostgreSQL store and outbox.

Connections are in autocommit mode (each store statement is its own transaction);
``conn.transaction()`` opens an explicit one. A connection is checked before it is lent,
so a cut connection is replaced instead of failing the next claim; an outage that
persists becomes :class:`~rabbitq.effects.store.StoreUnavailable` after ``timeout``.
The check is rabbitq's rather than the pool's, so that a transaction's ``BEGIN`` can be
the check (:meth:`Database.connection` with ``begin=True``): one round trip, not two.

Callers beyond ``pool_size`` queue for a connection: for ``timeout``, and on while the
pool gives connections back meanwhile (busy, not stuck).
:meth:`Database.close` while callers use the pool or wait for it (a status writer's
flush beside 300 status reads) leaves it to the last of them to close: closing it under
them failed them all (``the pool ... is closed``). A pool that gives no
connection in time says why in its one line: the error of one direct connect when it
fails (``database "payments" does not exist``, connection refused), else that all its
connections were busy; psycopg's own words are only in the pool's warnings.
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
        self._returned = 0  # connections given back: a busy pool's progress

    def __repr__(self) -> str:
        return f"Database({redact_url(self.dsn)!r})"

    async def open(self) -> None:
        """Open the pool and create the schema if it is missing (idempotent). The first
        connection is a direct one, which runs the schema: a database that cannot be
        reached fails here at once, with its cause, before any pool retries it."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._pool is None:
                first = await self._connect()
                try:
                    if not self._schema_ready:
                        await self.create_schema(first)
                finally:
                    await first.close()
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

    async def create_schema(self, conn: Conn | None = None) -> None:
        """Run the schema statements in one transaction under an advisory lock, on
        ``conn`` or a pooled connection."""
        try:
            if conn is None:
                assert self._pool is not None
                async with self._pool.connection() as pooled:
                    await self._run_schema(pooled)
            else:
                await self._run_schema(conn)
        except LINK_ERRORS as exc:
            raise await self.unavailable(exc) from exc
        self._schema_ready = True

    async def _run_schema(self, conn: Conn) -> None:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_id(self._schema_name),))
            for statement in self._schema:
                await conn.execute(statement)

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
        return await self._connect()

    async def _connect(self) -> Conn:
        try:
            return await psycopg.AsyncConnection.connect(
                self.dsn, autocommit=True, connect_timeout=max(1, int(self.timeout))
            )
        except LINK_ERRORS as exc:
            raise StoreUnavailable(f"{self!r} is unavailable: {one_line(str(exc))}") from exc

    async def unavailable(self, exc: BaseException) -> StoreUnavailable:
        """The :class:`StoreUnavailable` for ``exc``, in one line; for a pool's timeout,
        with its cause (:func:`why_no_connection`)."""
        why = await self.why_no_connection() if isinstance(exc, PoolTimeout) else str(exc)
        return StoreUnavailable(f"{self!r} is unavailable: {one_line(why)}")

    async def why_no_connection(self) -> str:
        """Why the pool gave no connection within ``timeout``: the error of one direct
        connect, else (it connects) that all the pool's connections were busy."""
        try:
            conn = await psycopg.AsyncConnection.connect(
                self.dsn, autocommit=True, connect_timeout=max(1, int(self.timeout))
            )
        except LINK_ERRORS as exc:
            return str(exc)
        await conn.close()
        return (
            f"all {self._pool_size} connections of its pool were busy for {self.timeout:g}s"
            " (more callers at once than its pool_size, or slow statements)"
        )

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
                self._returned += 1
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
        check loop does, with the check doing a transaction's first step as well.

        A caller that waited ``timeout`` for a connection while others gave theirs back
        (the pool is busy, not stuck) waits on, in its place in the pool's queue."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        while True:
            returned = self._returned
            try:
                conn = await pool.getconn(timeout=max(0.0, deadline - loop.time()))
            except PoolTimeout:
                if self._returned == returned:  # no connection came back: stuck or down
                    raise
                deadline = loop.time() + self.timeout
                continue
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
