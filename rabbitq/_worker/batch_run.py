"""One batch run: the messages of a batch in, one :class:`~rabbitq._worker.outcome.Outcome`
per message out (docs/batches.md).

With an idempotency store the order is the guarantee, as :func:`rabbitq.effects.guard.run_once`'s
is for one message:

1. each message's key; a key repeated in the batch: the later messages are duplicates
   (acked, not given to the handler; :func:`~rabbitq._worker.batch_plan.first_of_each_key`);
2. claim every other key: done -> a duplicate, busy elsewhere -> the shortest retry tier
   (no attempt used), the store failing -> a failed attempt of that message;
3. call the handler once with the rest, within its timeout (per batch);
4. the messages it succeeded on are marked done, those it failed on released, and only
   then are the outcomes handed back, to be settled (acked, or copied then acked).

A worker killed between the handler's return and the done marks leaves the keys claimed:
the redelivered messages wait until the claims lapse (their heartbeat stopped with the
worker: :mod:`rabbitq.effects.heartbeat`), then run again (the batch's effects outside
the store can repeat, as a single handler's can). Killed after the marks, before the
acks: the redelivered messages are duplicates, acked without running.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .._amqp import headers as h
from .._amqp.properties import message_id_of
from ..batch import BatchContext, BatchItemFailed
from ..context import Context
from ..effects.guard import busy_decision, claim_waiting, key_of
from ..effects.heartbeat import held
from ..effects.store import BUSY, DONE, Claim, IdempotencyStore, lease_for
from ..errors import HandlerTimeout
from ..handler import Handler
from ..job import failed
from ..outcome import ACK, Outcome
from .batch_plan import failures_of, first_of_each_key

log = logging.getLogger("rabbitq.worker")


@dataclass(frozen=True, slots=True)
class BatchItem:
    """One message of a batch: decoded, with its delivery (a
    :class:`rabbitq._worker.dispatch.Delivery`) and its attempt."""

    message: Any
    delivery: Any
    attempt: int


def _context(
    handler: Handler, item: BatchItem, message_id: str, queue: str, type_name: str
) -> Context:
    d = item.delivery
    return Context(
        message_id=message_id,
        attempt=item.attempt,
        max_attempts=handler.retry.attempts,
        redelivered=bool(d.redelivered),
        headers=d.headers or {},
        correlation_id=d.correlation_id,
        queue=queue,
        type=type_name,
        routing_key=d.routing_key or "",
        timestamp=d.timestamp,
    )


class _Run:
    """The state of one batch run: an outcome per message as it becomes known."""

    def __init__(self, handler: Handler, type_name: str, items: Sequence[BatchItem]) -> None:
        self.handler = handler
        self.type_name = type_name
        self.items = items
        self.outcomes: list[Outcome | None] = [None] * len(items)
        self.claims: dict[int, Claim] = {}

    def fail(self, i: int, error: Exception, duration: float = 0.0) -> None:
        attempt = self.items[i].attempt
        self.outcomes[i] = failed(self.handler.retry, self.type_name, attempt, error, duration)

    def duplicate(self, i: int) -> None:
        attempt = self.items[i].attempt
        self.outcomes[i] = Outcome(ACK, self.type_name, attempt, duplicate=True)

    async def claim(self, store: IdempotencyStore, keys: list[str | None]) -> None:
        """Steps 1 and 2: duplicates out, every other key claimed."""
        live = [i for i, k in enumerate(keys) if k is not None]
        keep, repeats = first_of_each_key([k for k in keys if k is not None])
        for later in repeats:
            self.duplicate(live[later])
        wanted = [live[j] for j in keep]
        lease = lease_for(self.handler.timeout)
        answers = await asyncio.gather(
            *(claim_waiting(store, str(keys[i]), lease) for i in wanted), return_exceptions=True
        )
        for i, answer in zip(wanted, answers, strict=True):
            if isinstance(answer, asyncio.CancelledError):
                raise answer
            if isinstance(answer, Exception):
                self.fail(i, answer)  # the store failed: a failed attempt, not unchecked
            elif isinstance(answer, BaseException):
                raise answer
            elif answer.status is DONE:
                self.duplicate(i)
            elif answer.status is BUSY:
                self._busy(i, str(keys[i]))
            else:
                self.claims[i] = answer

    def _busy(self, i: int, key: str) -> None:
        item = self.items[i]
        error = f"KeyBusy: key {key!r} is being handled by another worker"
        retry = busy_decision(self.handler.retry, item.attempt)
        if retry is None:  # no retry tier to wait in: its retry policy decides
            self.fail(i, BatchItemFailed(error))
            return
        self.outcomes[i] = Outcome(
            retry, self.type_name, item.attempt, error=h.truncate_utf8(error, 1024), busy=True
        )

    async def settle_keys(self, store: IdempotencyStore) -> None:
        """Step 4: done marks for the messages that succeeded, releases for the rest."""
        done = [i for i, o in enumerate(self.outcomes) if i in self.claims and o and not _failed(o)]
        marks = await asyncio.gather(
            *(store.done(self.claims[i]) for i in done), return_exceptions=True
        )
        for i, mark in zip(done, marks, strict=True):
            if isinstance(mark, Exception):
                self.fail(i, mark)  # not marked: retried (its effect may repeat)
                await _release(store, [self.claims[i]])
            elif mark is False:
                log.warning(
                    "key %r: the lease expired while the batch ran and another worker took "
                    "it over; both may have run (raise the handler's timeout)",
                    self.claims[i].key,
                )
        await _release(store, [c for i, c in self.claims.items() if i not in done])


def _failed(outcome: Outcome) -> bool:
    return outcome.decision is not ACK


async def _release(store: IdempotencyStore, claims: Sequence[Claim]) -> None:
    # Shielded: a batch cancelled by a shutdown still frees its keys.
    async def release(claim: Claim) -> None:
        try:
            await asyncio.shield(store.release(claim))
        except (Exception, asyncio.CancelledError) as exc:
            log.warning("could not release key %r (%s); its lease will expire", claim.key, exc)

    await asyncio.gather(*(release(c) for c in claims))


async def _call(handler: Handler, messages: list[Any], ctx: BatchContext) -> object:
    args = (messages, ctx) if handler.wants_context else (messages,)
    if handler.timeout is None:
        return await handler.fn(*args)
    try:
        async with asyncio.timeout(handler.timeout):
            return await handler.fn(*args)
    except TimeoutError:
        raise HandlerTimeout(
            f"batch handler exceeded its timeout of {handler.timeout:g}s"
        ) from None


async def run_batch(
    handler: Handler, type_name: str, queue: str, items: Sequence[BatchItem]
) -> list[Outcome]:
    """Run ``items`` through the batch ``handler`` once; an outcome per item, in order
    (see the module docstring). ``asyncio.CancelledError`` (shutdown) propagates after
    the keys it claimed are released; every other exception becomes outcomes."""
    started = time.perf_counter()
    run = _Run(handler, type_name, items)
    ids = [message_id_of(item.delivery, type_name) for item in items]
    keys: list[str | None] = []
    for i, item in enumerate(items):
        try:
            keys.append(key_of(handler.key, item.message, ids[i]))
        except Exception as exc:  # the key function failed on this message
            keys.append(None)
            run.fail(i, exc)
    store = handler.idempotency
    try:
        if store is not None:
            await run.claim(store, keys)
        called = [i for i, o in enumerate(run.outcomes) if o is None]
        if called:
            messages = [items[i].message for i in called]
            ctx = BatchContext(
                queue=queue,
                type=type_name,
                contexts=tuple(
                    _context(handler, items[i], ids[i], queue, type_name) for i in called
                ),
                keys=tuple(str(keys[i]) for i in called),
            )
            try:
                async with held(list(run.claims.values())):  # LeaseLost if one may lapse
                    answer = await _call(handler, messages, ctx)
                failures = failures_of(answer, messages, getattr(handler.fn, "__qualname__", "?"))
            except Exception as exc:  # the whole batch failed
                failures = dict.fromkeys(range(len(called)), exc)
            duration = time.perf_counter() - started
            for j, i in enumerate(called):
                if j in failures:
                    run.fail(i, failures[j], duration)
                else:
                    run.outcomes[i] = Outcome(ACK, type_name, items[i].attempt, duration)
        if store is not None:
            await run.settle_keys(store)
    except asyncio.CancelledError:
        if store is not None:
            await _release(store, list(run.claims.values()))
        raise
    return [o for o in run.outcomes if o is not None]
