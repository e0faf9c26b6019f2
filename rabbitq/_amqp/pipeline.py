"""Many publishes with their confirms pipelined: ``Publisher.publish_many``'s loop, and
its per-message unique keys.

``window`` publishes are in flight at a time; each window is awaited whole, so that a
failed publish does not stop the others: :class:`~rabbitq.errors.PartialPublish` then
says which ids were confirmed and which failed, in publish order. An error that is not
a :class:`~rabbitq.errors.PublishError` (a bad argument, a cancellation) is raised as
it is, after its window.

With ``timeout``, one timer bounds a whole window (its publishes start together), not
one per publish: those still unanswered after ``timeout`` seconds are cancelled, and
each fails with ``timed_out(item)``. The caller cancelled meanwhile: every publish of
the window is cancelled and waited for, then the cancellation goes on.
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


async def within_window(
    sends: list[Awaitable[str]], timeout: float
) -> list[str | BaseException | None]:
    """Each send's result or exception, None for one cancelled after ``timeout`` seconds
    without an answer (one timer for them all)."""
    tasks = [asyncio.ensure_future(send) for send in sends]
    try:
        _, late = await asyncio.wait(tasks, timeout=timeout)
    except BaseException:  # cancelled: none of the window outlives its call
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    if late:
        for task in late:
            task.cancel()
        await asyncio.wait(late)
    return [None if task in late else _outcome(task) for task in tasks]


def _outcome(task: asyncio.Future[str]) -> str | BaseException:
    if task.cancelled():  # by someone else than the window: raised, as gather would
        return asyncio.CancelledError()
    return task.exception() or task.result()


async def pipelined(
    items: Iterable[T],
    send: Callable[[T, str], Awaitable[str]],
    *,
    window: int,
    timeout: float | None = None,
    timed_out: Callable[[T], PublishError] | None = None,
) -> list[str]:
    """``send(item, message_id)`` for each item with a new id, ``window`` at a time;
    the ids ``send`` returned, in order (a unique publish may return an earlier one's).
    ``timeout`` (with ``timed_out``): the bound of each window's wait, see above."""
    if timeout is not None and timed_out is None:
        raise ValueError("a timeout needs timed_out")
    confirmed: list[str] = []
    failed: list[tuple[str, PublishError]] = []
    batch: list[Awaitable[str]] = []
    ids: list[str] = []
    held: list[T] = []

    async def drain() -> None:
        if timeout is None:
            results: list[Any] = await asyncio.gather(*batch, return_exceptions=True)
        else:
            results = await within_window(batch, timeout)
        for mid, item, result in zip(ids, held, results, strict=True):
            if result is None:
                assert timed_out is not None
                failed.append((mid, timed_out(item)))
            elif isinstance(result, PublishError):
                failed.append((mid, result))
            elif isinstance(result, BaseException):
                raise result
            else:
                confirmed.append(result)
        batch.clear()
        ids.clear()
        held.clear()

    for item in items:
        mid = uuid.uuid4().hex
        ids.append(mid)
        held.append(item)
        batch.append(send(item, mid))
        if len(batch) >= window:
            await drain()
    if batch:
        await drain()
    if failed:
        raise PartialPublish(confirmed, failed)
    return confirmed
