"""Keys freed when their message is gone for good: a dead letter purged from the DLQ
(``rabbitq dlq purge --app``, the console's purge) releases the unique key it holds and
ends its debounce burst, so no key is held by a message that no longer exists."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

from .._amqp import headers as h
from ..payloads.steps import blobs_released
from .store import KeyStore

log = logging.getLogger("rabbitq.unique")


class Release(Protocol):
    """``await release(headers, message_id)``: free what that message holds;
    ``await release.close()`` once done (the store's connections)."""

    async def __call__(self, headers: Mapping[str, Any], message_id: str) -> None: ...

    async def close(self) -> None: ...


def keys_of(headers: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """The unique key and the debounce key a message's headers name (pure)."""
    return _text(headers.get(h.UNIQUE_KEY)), _text(headers.get(h.DEBOUNCE_KEY))


class KeyRelease:
    """Frees the keys a message's headers name, in ``store``, if that message holds
    them (compare-and-delete: a key taken since by another message stays)."""

    def __init__(self, store: KeyStore) -> None:
        self.store = store

    async def __call__(self, headers: Mapping[str, Any], message_id: str) -> None:
        unique, debounce = keys_of(headers)
        if unique and message_id:
            await self.store.release(unique, message_id)
        if debounce and message_id:
            await self.store.finish(debounce, message_id)

    async def close(self) -> None:
        await self.store.close()


def key_release(app: Any) -> KeyRelease | None:
    """The release of ``app``'s keys (its ``unique`` publish step's store); None for an
    app without a store."""
    store: KeyStore | None = next((s.store for s in app.publish_steps if s.name == "unique"), None)
    return None if store is None else KeyRelease(store)


Gone = Sequence[tuple[Mapping[str, Any], str]]
"""Messages a purge deleted: ``(headers, message_id)`` (as :data:`rabbitq.dlq.operations.Gone`)."""


def keys_released(app: Any) -> Callable[[Gone], Awaitable[int]] | None:
    """What a DLQ purge calls to free the keys of the messages it deleted
    (:func:`release_all` over ``app``'s :func:`key_release`); None without a store."""
    release = key_release(app)
    if release is None:
        return None

    async def released(gone: Gone) -> int:
        return await release_all(release, [(h, m) for h, m in gone if any(keys_of(h))])

    return released


async def release_all(release: Release, gone: Gone) -> int:
    """Release each ``(headers, message_id)``, then close ``release``; a failure is
    logged (the key is then held until its window ends) and counted. Returns how many
    failed."""
    failed = 0
    try:
        for headers, message_id in gone:
            try:
                await release(headers, message_id)
            except Exception as exc:
                failed += 1
                log.warning("could not release the keys of purged %s: %s", message_id, exc)
    finally:
        await release.close()
    return failed


def _text(value: Any) -> str | None:
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return value if isinstance(value, str) and value else None


def purge_releases(app: Any) -> list[Callable[[Gone], Awaitable[Any]]]:
    """What a purge of ``app``'s DLQ releases with the messages it deletes (``released=``
    of :func:`rabbitq.dlq.purge`): their large payloads' blobs and their keys."""
    blobs = blobs_released(app.large_payloads) if app.large_payloads else None
    return [r for r in (blobs, keys_released(app)) if r is not None]
