"""Running a handler once per key: claim, run, send the follow-ups, mark done or release.

:func:`run_once` is what the worker (and ``rabbitq.testing``) wraps around a handler
call. The order is the guarantee:

1. claim the key (a store error raises: the attempt fails, the handler is not run);
   DONE -> :data:`DUPLICATE` (not run), BUSY -> :data:`BUSY_ELSEWHERE` (not run);
2. run the handler, with :class:`Effects` as ``ctx``'s way to open the store's
   transaction and to publish follow-ups;
3. on success send the buffered follow-ups (with confirms), then mark the key done;
4. on any failure (the handler's, the send's) release the key and re-raise.

A follow-up published inside ``ctx.transaction()`` with an outbox becomes an outbox row in
that transaction instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

from ..errors import ConfigurationError
from ..message import Message
from ..retry import Retry, RetryPolicy
from .followups import FollowUp, make_follow_up
from .store import BUSY, DONE, Claim, IdempotencyStore, StoreUnavailable

log = logging.getLogger("rabbitq.effects")

RAN = "ran"
DUPLICATE = "duplicate"
BUSY_ELSEWHERE = "busy"
# How long a delivery whose key is busy elsewhere waits for the other worker to finish
# before it is sent to the first retry tier instead (without using an attempt).
BUSY_WAIT = 2.0
BUSY_POLL = 0.1

Send = Callable[[Sequence[FollowUp]], Awaitable[None]]


class Effects:
    """A delivery's effects: the store's transaction and the follow-ups (behind ``ctx``)."""

    def __init__(
        self,
        *,
        message_id: str,
        correlation_id: str | None,
        key: str,
        store: IdempotencyStore | None = None,
        outbox: Any = None,
    ) -> None:
        self.message_id = message_id
        self.correlation_id = correlation_id
        self.key = key
        self.store = store
        self.outbox = outbox
        self.claim: Claim | None = None
        self.follow_ups: list[FollowUp] = []
        self._position = 0
        self._conn: Any = None  # the open transaction's connection, if any

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Any]:
        """The store's connection in a transaction that also marks the key done."""
        store = self.store
        if store is None or not getattr(store, "transactional", False):
            raise ConfigurationError(
                "ctx.transaction() needs a PostgresStore as the handler's idempotency store"
            )
        if self.claim is None or self._conn is not None:
            raise ConfigurationError("ctx.transaction() can be opened once per delivery")
        async with store.transaction(self.claim) as conn:  # type: ignore[attr-defined]
            self._conn = conn
            try:
                yield conn
                await self._flush_to_outbox(conn)
            finally:
                self._conn = None

    async def publish(self, message: Message, *, headers: Mapping[str, Any] | None = None) -> str:
        """Publish ``message`` if the handler succeeds; return its ``message_id``."""
        if not isinstance(message, Message):
            raise ConfigurationError(f"ctx.publish() takes a Message, not {message!r}")
        self._position += 1
        follow_up = make_follow_up(
            message,
            incoming_id=self.message_id,
            incoming_correlation=self.correlation_id,
            origin=self.key,
            position=self._position,
            headers=headers,
        )
        self.follow_ups.append(follow_up)
        if self._conn is not None and self.outbox is not None:
            await self._flush_to_outbox(self._conn)
        return follow_up.message_id

    async def _flush_to_outbox(self, conn: Any) -> None:
        if self.outbox is None:
            return
        for f in self.follow_ups:
            await self.outbox.publish(
                conn,
                f.message,
                message_id=f.message_id,
                correlation_id=f.correlation_id,
                headers=f.headers,
            )
        self.follow_ups.clear()  # in the outbox now: the relay sends them


async def _claim(store: IdempotencyStore, key: str, lease: float) -> Claim:
    """Claim, waiting up to BUSY_WAIT for a key that another worker is handling."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + BUSY_WAIT
    while True:
        claim = await store.claim(key, lease=lease)
        if claim.status is not BUSY or loop.time() >= deadline:
            return claim
        await asyncio.sleep(BUSY_POLL)


async def run_once(
    effects: Effects,
    call: Callable[[], Awaitable[None]],
    send: Send,
    *,
    lease: float,
) -> str:
    """Run ``call`` at most once per key (see the module docstring); RAN, DUPLICATE or
    BUSY_ELSEWHERE. Exceptions of the claim, the handler and the send propagate."""
    store = effects.store
    if store is None:
        await call()
        if effects.follow_ups:
            await send(effects.follow_ups)
        return RAN
    claim = effects.claim = await _claim(store, effects.key, lease)
    if claim.status is DONE:
        return DUPLICATE
    if claim.status is BUSY:
        return BUSY_ELSEWHERE
    try:
        await call()
        if effects.follow_ups:
            await send(effects.follow_ups)
        if not await store.done(claim):
            log.warning(
                "key %r: the lease expired while the handler ran and another worker took "
                "it over; both may have run (raise the handler's timeout)",
                effects.key,
            )
    except BaseException:
        await _release(store, claim)
        raise
    return RAN


async def _release(store: IdempotencyStore, claim: Claim) -> None:
    # Shielded: a handler cancelled by its timeout or a shutdown still frees its key.
    try:
        await asyncio.shield(store.release(claim))
    except (StoreUnavailable, asyncio.CancelledError) as exc:
        log.warning("could not release key %r (%s); its lease will expire", claim.key, exc)


def busy_decision(policy: RetryPolicy, attempt: int) -> Retry | None:
    """Where a delivery whose key is busy elsewhere goes: the shortest retry tier, as the
    same attempt (none is used up); None if the policy has no retry tiers (pure)."""
    if not policy.delays_ms:
        return None
    return Retry(min(policy.delays_ms), attempt, deferred=True)


def key_of(key_fn: Callable[[Any], object] | None, message: Any, message_id: str) -> str:
    """The idempotency key: ``key_fn(message)`` as text, else the ``message_id``."""
    if key_fn is None:
        return message_id
    key = key_fn(message)
    if key is None or key == "":
        raise ConfigurationError("the idempotency key function returned no key")
    return str(key)
