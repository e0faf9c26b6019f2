"""Sending a handler's follow-ups: each through the app's publisher, as ``publish``
sends a message (its publish steps: unique keys, priority lanes, encryption, large
payloads, the partition key, the delay ladder), all in flight at once, each confirmed
(or the whole send raises a PublishError).

The send has a deadline: a broker that blocks publishers (a resource alarm) would
otherwise hold the handler's slot for as long as the alarm lasts. Past it the attempt
fails like any unconfirmed publish (the key is released and the message retried; the
follow-ups may have been stored, and keep their message ids on the next try)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from .._amqp.lanes import base_queue, check_priority
from .._amqp.outgoing import KEY_STEPS, require_step
from .._amqp.publisher import Publisher
from ..errors import ConfigurationError, PublishError
from ..hooks import Hooks
from .followups import FollowUp

FOLLOW_UP_DEADLINE = 30.0
"""Seconds a handler's follow-ups may take to be confirmed (as a retry or DLQ copy)."""

Publish = Callable[..., Awaitable[str]]
"""``Publisher.publish`` of the worker's app (:mod:`rabbitq._amqp.publisher`)."""


async def send_follow_ups(
    publish: Publish, follow_ups: Sequence[FollowUp], deadline: float = FOLLOW_UP_DEADLINE
) -> None:
    """Publish ``follow_ups`` with ``publish`` and wait for every confirm, at most
    ``deadline`` seconds (then :class:`~rabbitq.errors.PublishError`).

    Called while the delivery's span is current, so each follow-up's producer span (and
    its ``traceparent``) belongs to the delivery's trace."""

    async def one(f: FollowUp) -> Any:
        return await publish(
            f.message,
            message_id=f.message_id,
            correlation_id=f.correlation_id,
            headers=dict(f.headers),
            **f.options,
        )

    try:
        async with asyncio.timeout(deadline):
            await asyncio.gather(*(one(f) for f in follow_ups))
    except TimeoutError:
        raise PublishError(
            f"{len(follow_ups)} follow-up(s) not confirmed within {deadline:g}s "
            "(is the broker blocking publishers? see rabbitq_connection_blocked)"
        ) from None


class FollowUpSender:
    """A worker's ``send``: its follow-ups and workflow steps through a publisher of its
    app on its connection (``connection()``), opened on the first send, closed with
    :meth:`aclose` (the channel only: the connection is the worker's)."""

    def __init__(self, app: Any, url: str, connection: Callable[[], Any], hooks: Hooks) -> None:
        self.app, self.url, self.connection, self.hooks = (
            publishing_app(app),
            url,
            connection,
            hooks,
        )
        self._publisher: Publisher | None = None
        self._lock = asyncio.Lock()

    async def __call__(self, follow_ups: Sequence[FollowUp]) -> None:
        await send_follow_ups((await self._open()).publish, follow_ups)

    def check(self, options: Mapping[str, Any]) -> None:
        """Refuse at ``ctx.publish`` what the publisher would refuse when sending."""
        check_options(self.app, options)

    async def _open(self) -> Publisher:
        async with self._lock:
            if self._publisher is None or not self._publisher.is_open:
                publisher = Publisher(
                    self.app, url=self.url, connection=self.connection(), hooks=self.hooks,
                    timeout=FOLLOW_UP_DEADLINE,
                )  # fmt: skip
                await publisher.open()
                self._publisher = publisher
            return self._publisher

    async def aclose(self) -> None:
        publisher, self._publisher = self._publisher, None
        if publisher is not None:
            with contextlib.suppress(Exception):
                await publisher.close()


def publishing_app(app: Any) -> Any:
    """The app a worker publishes follow-ups as: the app itself, or for one lane's view
    (worker.laned) the whole app, so that a follow-up's lane is its own priority's."""
    if getattr(app, "lane", None) is None:
        return app
    whole = copy.copy(app)
    whole.lane, whole.queue = None, base_queue(app)
    return whole


def check_options(app: Any, options: Mapping[str, Any]) -> None:
    """A ConfigurationError for follow-up ``options`` that ``app``'s publisher refuses
    (pure): a priority beyond its lanes, ``unique_for`` without a key store, a delay
    with partitions (the ladder delivers to one queue)."""
    if options.get("priority"):
        check_priority(options["priority"], getattr(app, "priorities", 0))
    if options.get("unique_for") is not None:
        require_step(app.publish_steps, "unique", KEY_STEPS["unique"])
    partitioned: int = getattr(app, "partitions", 0)
    if options.get("delay") is not None and partitioned:
        raise ConfigurationError("delay= is not supported with App(partitions=N) yet")
