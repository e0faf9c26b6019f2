"""The status store protocol, and the one place a ``status=`` argument becomes a store.

A status store appends records and reads a message's records back; it keeps them for
``retention`` seconds (as long as the idempotency keys of the same store: 7 days by
default); a :class:`GroupReader` also reads a workflow group's. ``App(status=...)``
takes a :class:`StatusStore` (:class:`PostgresStatus`, :class:`RedisStatus`) or an
idempotency store (``PostgresStore``, ``RedisStore``), whose ``location`` (connection
settings, prefix, retention) then makes the status store: one object for both.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from ..effects.location import PostgresLocation, RedisLocation
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


@runtime_checkable
class IdFinder(Protocol):
    """A status store that can find the message ids starting with a prefix (both of
    rabbitq's can): ``rabbitq cancel 6f1c0e2a`` resolves a short id with it."""

    async def ids_starting_with(self, prefix: str, limit: int) -> list[str]:
        """At most ``limit`` distinct message ids that start with ``prefix`` and have
        records, sorted (which ones, when more match, is the store's order)."""


def status_store(store: Any) -> StatusStore:
    """The status store for ``App(status=store)``: ``store`` itself if it is one, else
    the companion at the ``location`` of a PostgreSQL or Redis store (``PostgresStore``,
    ``RedisStore``, or a subclass: same database, same prefix, retention and timeout;
    :mod:`rabbitq.effects.location`), else a ConfigurationError."""
    if isinstance(store, StatusStore):
        return store
    location = getattr(store, "location", None)
    if isinstance(location, PostgresLocation):
        from .postgres import PostgresStatus

        return PostgresStatus(
            location.dsn,
            retention=location.retention,
            prefix=location.prefix,
            timeout=location.timeout,
        )
    if isinstance(location, RedisLocation):
        from .redisstatus import RedisStatus

        return RedisStatus(
            location.url,
            retention=location.retention,
            key_prefix=location.status_prefix,  # rabbitq:status:
            timeout=location.timeout,
        )
    raise ConfigurationError(
        f"status must be a PostgresStore, RedisStore, PostgresStatus or RedisStatus, "
        f"not {store!r}"
    )
