"""A lazily opened psycopg connection pool, shared by the PostgreSQL store and outbox.

Connections are in autocommit mode (each store statement is its own transaction);
``conn.transaction()`` opens an explicit one. A connection is checked before it is lent,
so a cut connection is replaced instead of failing the next claim; an outage that
persists becomes :class:`~rabbitq.effects.store.StoreUnavailable` after ``timeout``.
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
                    check=AsyncConnectionPool.check_connection,
                    name=self._schema_name,
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
    async def connection(self) -> AsyncIterator[Conn]:
        """A pooled connection; an unreachable database is :class:`StoreUnavailable`."""
        if not self._schema_ready:
            await self.open()
        assert self._pool is not None
        try:
            async with self._pool.connection() as conn:
                yield conn
        except LINK_ERRORS as exc:
            raise StoreUnavailable(f"{self!r} is unavailable: {exc}") from exc
