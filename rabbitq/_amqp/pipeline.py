"""Many publishes with their confirms pipelined: ``Publisher.publish_many``'s loop, and
its per-message unique keys.

``window`` publishes are in flight at a time; each window is awaited whole, so that a
failed publish does not stop the others: :class:`~rabbitq.errors.PartialPublish` then
says which ids were confirmed and which failed, in publish order. An error that is not
a :class:`~rabbitq.errors.PublishError` (a bad argument, a cancellation) is raised as
it is, after its window.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from ..errors import ConfigurationError, PartialPublish, PublishError

T = TypeVar("T")


def key_function(
    unique_for: float | None, unique_key: Callable[[Any], str] | None
) -> Callable[[Any], str] | None:
    """``publish_many``'s ``unique_key``: a function of the message giving its key, given
    with ``unique_for`` (one key for the whole batch would send only its first)."""
    if (unique_for is None) != (unique_key is None) or isinstance(unique_key, str):
        raise ConfigurationError(
            "publish_many(unique_for=S) needs unique_key=a function of the message "
            "(each message's own key), and unique_key needs unique_for"
        )
    if unique_key is not None and not callable(unique_key):
        raise ConfigurationError(f"unique_key must be a function, not {unique_key!r}")
    return unique_key


async def pipelined(
    items: Iterable[T], send: Callable[[T, str], Awaitable[str]], *, window: int
) -> list[str]:
    """``send(item, message_id)`` for each item with a new id, ``window`` at a time;
    the ids ``send`` returned, in order (a unique publish may return an earlier one's)."""
    confirmed: list[str] = []
    failed: list[tuple[str, PublishError]] = []
    batch: list[Awaitable[str]] = []
    ids: list[str] = []

    async def drain() -> None:
        results = await asyncio.gather(*batch, return_exceptions=True)
        for mid, result in zip(ids, results, strict=True):
            if isinstance(result, PublishError):
                failed.append((mid, result))
            elif isinstance(result, BaseException):
                raise result
            else:
                confirmed.append(result)
        batch.clear()
        ids.clear()

    for item in items:
        mid = uuid.uuid4().hex
        ids.append(mid)
        batch.append(send(item, mid))
        if len(batch) >= window:
            await drain()
    if batch:
        await drain()
    if failed:
        raise PartialPublish(confirmed, failed)
    return confirmed
