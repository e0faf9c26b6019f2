"""A lazily opened psycopg connection pool, shared by the PostgreSQL store and outbox.

Connections are in autocommit mode (each store statement is its own transaction);
``conn.transaction()`` opens an explicit one. A connection is checked before it is lent,
so a cut connection is replaced instead of failing the next claim; an outage that
persists becomes :class:`~rabbitq.effects.store.StoreUnavailable` after ``timeout``.
The check is rabbitq's rather than the pool's, so that a transaction's ``BEGIN`` can be
the check (:meth:`Database.connection` with ``begin=True``): one round trip, not two.
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
            raise StoreUnavailable(f"{self!r} is unavailable: {exc}") from exc
        self._schema_ready = True

    async def close(self) -> None:
        """Close the pool (idempotent)."""
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
            raise StoreUnavailable(f"{self!r} is unavailable: {exc}") from exc

    @contextlib.asynccontextmanager
    async def connection(self, *, begin: bool = False) -> AsyncIterator[Conn]:
        """A pooled connection, checked; with ``begin``, in a transaction that the caller
        ends (``COMMIT`` or ``ROLLBACK``; one left open is rolled back by the pool). An
        unreachable database is :class:`StoreUnavailable`."""
        if not self._schema_ready:
            await self.open()
        pool = self._pool
        assert pool is not None
        try:
            conn = await self._checked(pool, "BEGIN" if begin else "")
            try:
                yield conn
            finally:
                await pool.putconn(conn)
        except LINK_ERRORS as exc:
            raise StoreUnavailable(f"{self!r} is unavailable: {exc}") from exc

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
