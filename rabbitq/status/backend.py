"""The status store protocol, and the one place a ``status=`` argument becomes a store.

A status store appends records and reads a message's records back; it keeps them for
``retention`` seconds (as long as the idempotency keys of the same store: 7 days by
default); a :class:`GroupReader` also reads a workflow group's. ``App(status=...)``
takes a :class:`StatusStore` (:class:`PostgresStatus`, :class:`RedisStatus`) or an
idempotency store (``PostgresStore``, ``RedisStore``), whose connection settings and
retention then make the status store: one object for both.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from ..errors import ConfigurationError
from .group import GroupRecords
from .model import Record


@runtime_checkable
class StatusStore(Protocol):
    """Where status records live. ``write`` raises on any failure (the writer counts it)."""

    async def write(self, records: Sequence[Record]) -> None:
        """Append ``records`` in one round trip (one INSERT, one pipeline)."""

    async def read(self, message_id: str) -> list[Record]:
        """Every record kept for ``message_id``, in any order."""

    async def close(self) -> None:
        """Close the connections (opened again on next use)."""


@runtime_checkable
class GroupReader(Protocol):
    """A status store that can also read a workflow group (both of rabbitq's can); a
    store without ``read_group`` still records, and ``App.status`` then reads messages
    only."""

    async def read_group(self, group_id: str, limit: int) -> GroupRecords:
        """The records of at most ``limit`` members of ``group_id`` (each with all its
        records) and of its callbacks, and the number of members the store holds."""


def status_store(store: Any) -> StatusStore:
    """The status store for ``App(status=store)``: ``store`` itself if it is one, else
    the companion of a ``PostgresStore`` or ``RedisStore`` (same database, same
    retention; a ``RedisStore``'s timeout too), else a ConfigurationError."""
    if isinstance(store, StatusStore):
        return store
    kind = type(store).__name__
    if kind == "PostgresStore":
        from .postgres import PostgresStatus

        table: str = store.sql.table
        return PostgresStatus(
            store.db.dsn,
            retention=store.retention,
            prefix=table.removesuffix("idempotency"),
        )
    if kind == "RedisStore":
        from .redisstatus import RedisStatus

        prefix: str = store.key_prefix
        return RedisStatus(
            store.url,
            retention=store.retention,
            key_prefix=prefix.removesuffix("idem:") + "status:",  # rabbitq:status:
            timeout=store.timeout,
        )
    raise ConfigurationError(
        f"status must be a PostgresStore, RedisStore, PostgresStatus or RedisStatus, "
        f"not {store!r}"
    )
