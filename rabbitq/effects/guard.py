"""Running a handler once per key: claim, run, send the follow-ups, mark done or release.

:func:`run_once` is what the worker (and ``rabbitq.testing``) wraps around a handler
call. The order is the guarantee:

1. claim the key (a store error raises: the attempt fails, the handler is not run);
   DONE -> :data:`DUPLICATE` (not run), BUSY -> :data:`BUSY_ELSEWHERE` (not run);
2. run the handler, with :class:`Effects` as ``ctx``'s way to open the store's
   transaction and to publish follow-ups;
3. on success send the buffered follow-ups (with confirms), then mark the key done;
4. on any failure (the handler's, the send's) release the key and re-raise.

While steps 2 and 3 run the store's heartbeat renews the claim; if it may lapse (no
renewal confirmed in time) the handler is stopped with ``LeaseLost`` before it does
(:func:`rabbitq.effects.heartbeat.held`).

In transactional mode (``ctx.transaction()``) step 3 is :meth:`Effects.finish`: the
follow-ups become outbox rows of the handler's transaction (with an outbox) or are sent
and confirmed (without one), and only then does the transaction commit, with the done
mark. The transaction stays open after its ``async with`` block until the handler
returns, so no step of the handler can fail after the commit: a failure anywhere rolls
everything back, and the retry runs the whole handler.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from ..errors import ConfigurationError
from ..message import Message
from ..outcome import Retry
from ..retry import RetryPolicy
from .followups import FollowUp, make_follow_up, publish_options
from .heartbeat import held
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

OUTBOX_OPTIONS = (
    "ctx.publish(delay=, priority=, unique_for=) cannot be an outbox row (the relay sends "
    "a row as it was stored): publish it outside ctx.transaction(), or without an Outbox"
)


class Effects:
    """A delivery's effects: the store's transaction and the follow-ups (behind ``ctx``).

    ``ctx.transaction()`` opens the store's transaction; it **commits when the handler
    returns**, not at the end of the ``async with`` block, so code after the block is part
    of it: a step there that fails rolls the block's writes back and the retry runs the
    whole handler again (nothing committed is done twice, nothing after it is skipped).
    The block's own failure rolls back at once. See :meth:`finish`.
    """

    def __init__(
        self,
        *,
        message_id: str,
        correlation_id: str | None,
        key: str,
        store: IdempotencyStore | None = None,
        outbox: Any = None,
        check: Callable[[Mapping[str, Any]], None] | None = None,
    ) -> None:
        self.message_id = message_id
        self.check = check  # refuses follow-up options the app's publisher would
        self.correlation_id = correlation_id
        self.key = key
        self.store = store
        self.outbox = outbox
        self.claim: Claim | None = None
        self.follow_ups: list[FollowUp] = []
        self._position = 0
        self._conn: Any = None  # the open transaction's connection, if any
        self._tx: contextlib.AsyncExitStack | None = None  # closing it commits
        self._opened = False

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Any]:
        """The store's connection in a transaction that also marks the key done; it
        commits when the handler returns (after the follow-ups are confirmed)."""
        store = self.store
        if store is None or not getattr(store, "transactional", False):
            raise ConfigurationError(
                "ctx.transaction() needs a PostgresStore as the handler's idempotency store"
            )
        if self.claim is None or self._opened:
            raise ConfigurationError("ctx.transaction() can be opened once per delivery")
        if self.outbox is not None and any(f.options for f in self.follow_ups):
            raise ConfigurationError(OUTBOX_OPTIONS)  # they would become outbox rows
        self._opened = True
        tx = contextlib.AsyncExitStack()
        conn = await tx.enter_async_context(store.transaction(self.claim))  # type: ignore[attr-defined]
        self._tx, self._conn = tx, conn
        buffered = len(self.follow_ups)
        try:
            yield conn
        except BaseException as exc:
            # The block failed: its writes (and its outbox rows) roll back now, and the
            # follow-ups it buffered go with them.
            del self.follow_ups[buffered:]
            await self.abort(exc)
            raise

    async def publish(
        self,
        message: Message,
        *,
        headers: Mapping[str, Any] | None = None,
        delay: float | timedelta | None = None,
        priority: int = 0,
        unique_for: float | None = None,
    ) -> str:
        """Publish ``message`` if the handler succeeds; return its ``message_id``.
        ``delay``, ``priority`` and ``unique_for`` as for ``publish``; not for an outbox
        row (:data:`OUTBOX_OPTIONS`)."""
        if not isinstance(message, Message):
            raise ConfigurationError(f"ctx.publish() takes a Message, not {message!r}")
        options = publish_options(delay=delay, priority=priority, unique_for=unique_for)
        if options and self.check is not None:
            self.check(options)
        if options and self._conn is not None and self.outbox is not None:
            raise ConfigurationError(OUTBOX_OPTIONS)
        self._position += 1
        follow_up = make_follow_up(
            message,
            incoming_id=self.message_id,
            incoming_correlation=self.correlation_id,
            origin=self.key,
            position=self._position,
            headers=headers,
            options=options,
        )
        if self._conn is not None and self.outbox is not None:
            await self._write_to_outbox(self._conn, [follow_up])
        else:
            self.follow_ups.append(follow_up)
        return follow_up.message_id

    async def finish(self, send: Send) -> None:
        """The handler returned: deliver its follow-ups, then commit its transaction.

        With an open transaction and an outbox, the follow-ups become outbox rows of that
        transaction; without an outbox they are sent and confirmed *before* the commit, so
        a send that fails rolls everything back and the retry runs the handler again (the
        follow-ups keep their message ids: a worker killed between the confirms and the
        commit makes duplicates a consumer recognises, never a loss)."""
        if self._conn is not None and self.outbox is not None:
            await self._write_to_outbox(self._conn, self.follow_ups)
            self.follow_ups.clear()  # in the outbox now: the relay sends them
        elif self.follow_ups:
            await send(self.follow_ups)
        tx, self._tx, self._conn = self._tx, None, None
        if tx is not None:
            await tx.aclose()  # commit, with the done mark

    async def abort(self, exc: BaseException) -> None:
        """Roll the open transaction back (no-op without one)."""
        tx, self._tx, self._conn = self._tx, None, None
        if tx is None:
            return
        try:
            await tx.__aexit__(type(exc), exc, exc.__traceback__)
        except Exception as error:  # the original failure is what the caller re-raises
            if error is not exc:
                log.warning(
                    "key %r: rolling back failed (%s); the database discards an "
                    "unfinished transaction with its connection",
                    self.key,
                    error,
                )

    async def _write_to_outbox(self, conn: Any, follow_ups: Sequence[FollowUp]) -> None:
        for f in follow_ups:
            await self.outbox.publish(
                conn,
                f.message,
                message_id=f.message_id,
                correlation_id=f.correlation_id,
                headers=f.headers,
            )


async def claim_waiting(store: IdempotencyStore, key: str, lease: float) -> Claim:
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
        if effects.follow_ups or effects.outbox is not None:  # else finish has nothing to do
            await effects.finish(send)
        return RAN
    claim = effects.claim = await claim_waiting(store, effects.key, lease)
    if claim.status is DONE:
        return DUPLICATE
    if claim.status is BUSY:
        return BUSY_ELSEWHERE
    try:
        async with held([claim]):  # stopped (LeaseLost) if its claim may lapse
            await call()
            await effects.finish(send)  # follow-ups, then the transaction's commit
        if not await store.done(claim):  # a no-op once the transaction marked it
            log.warning(
                "key %r: the lease expired while the handler ran and another worker took "
                "it over; both may have run (raise the handler's timeout)",
                effects.key,
            )
    except BaseException as exc:
        await effects.abort(exc)
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
