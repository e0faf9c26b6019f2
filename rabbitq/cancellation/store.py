"""The cancellations store: which message ids were cancelled, kept for
:data:`~rabbitq.cancellation.model.KEEP` seconds, in the app's own PostgreSQL or Redis.

It lives where the app's other stores live (the ``location`` of ``App(backend=...)``,
or of its idempotency or status store; :mod:`rabbitq.effects.location`):
``<prefix>cancellations`` in PostgreSQL, ``<base>cancel:<message_id>`` in Redis.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from ..effects.location import PostgresLocation, RedisLocation
from ..errors import ConfigurationError


class CancelStore(Protocol):
    """Where cancellations live. Each method raises
    :class:`~rabbitq.effects.StoreUnavailable` when the store cannot be reached."""

    async def add(self, message_ids: Sequence[str]) -> None:
        """Record ``message_ids`` as cancelled (again: no change but the expiry)."""

    async def which(self, message_ids: Sequence[str]) -> set[str]:
        """Those of ``message_ids`` that were cancelled, in one round trip."""

    async def durable(self) -> bool | None:
        """Whether a cancellation outlives a restart of the store (None: not known)."""

    async def close(self) -> None:
        """Close the connections (opened again on next use)."""


def location_of(stores: Iterable[Any]) -> PostgresLocation | RedisLocation | None:
    """The first PostgreSQL or Redis location among ``stores`` (a backend, an
    idempotency store, a status store; None entries skipped)."""
    for store in stores:
        where = getattr(store, "location", None)
        if isinstance(where, PostgresLocation | RedisLocation):
            return where
    return None


def cancel_store(stores: Iterable[Any]) -> CancelStore:
    """The cancellations store beside the first of ``stores`` that has a location; a
    ConfigurationError (one line) when none has."""
    where = location_of(stores)
    if isinstance(where, PostgresLocation):
        from .postgres import PostgresCancels

        return PostgresCancels(where)
    if isinstance(where, RedisLocation):
        from .redis import RedisCancels

        return RedisCancels(where)
    raise ConfigurationError(
        "cancellable=True needs a store to keep cancellations in: "
        "App(backend=PostgresBackend(...) or RedisBackend(...))"
    )
