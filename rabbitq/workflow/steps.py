"""The worker's side of workflows: what a delivery does for its chain or chord.

:func:`flow_of` gives a delivery its :class:`Flow` (None for a plain message of an app
without a status store: the fast path costs one header lookup). The worker
runs :class:`WorkflowStage` for every delivery, which then:

1. has the handler run through :meth:`Flow.around` (``job.wrap_call``): keeps its result
   (with a status store), and makes a chain's next step a follow-up, so that it is sent,
   confirmed, before the idempotency key is marked done and before the ack (or, in
   transactional mode with an outbox, is a row of the handler's transaction);
2. after the handler succeeded, or found its key done (a duplicate), calls
   :meth:`Flow.succeeded`: a chord member is marked done, and the member that finds its
   chord complete sends the callback once (:meth:`Flow.send_once`);
3. when the delivery is dead-lettered, calls :meth:`Flow.dead_lettered`: a chord
   member sends ``on_failure`` once.

Why the callback is sent once and never lost (docs/workflows.md says it in full): the
count is a set, so it grows only by members that succeeded; one delivery holds the claim
at a time (its token: the member's index and a nonce), and it is settled only after the
broker confirmed the callback and the store says ``sent``. A member that finds the claim
held by *another member* acks: the holder's delivery is not settled until the callback
is out, and if it dies, its redelivery (or retry, or replay: the same member) finds the
claim held by its own member, waits for the lease, and sends. A delivery that finds it
held by its own member (a duplicate) waits, and tries again later. Every copy of the
callback has the same ``message_id``, so the rare second send (a worker killed between
the confirm and the ``sent`` record) is a duplicate to the callback's idempotency store,
not a second callback.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from .._amqp import headers as h
from ..effects.followups import FollowUp, make_follow_up
from ..effects.guard import Effects
from ..effects.store import lease_for
from ..errors import PermanentError, RetryLater
from ..job import Job, Next, failed
from ..outcome import ACK, DeadLetter, Outcome
from ..retry import RetryPolicy
from . import wire
from .chords import ChordStore

log = logging.getLogger("rabbitq.workflow")

CLAIM_LEASE = 40.0
"""Seconds a delivery's claim on a chord's callback holds (the callback's publish has 30)."""
SAME_WAIT = 2.0
"""How long a delivery waits for another delivery of the same member that holds the claim
(a duplicate, most often finishing) before it tries again later."""
SAME_RETRY = 5.0

Send = Callable[[Sequence[FollowUp]], Awaitable[None]]


class Flow:
    """One delivery's part in a workflow (and its result, with a status store)."""

    def __init__(
        self,
        *,
        message_id: str,
        group_id: str | None,
        chain: list[wire.Step] | None,
        member: wire.Member | None,
        callback_of: str | None,
        chords: ChordStore | None,
        send: Send,
    ) -> None:
        self.message_id = message_id
        self.group_id = group_id
        self.chain = chain
        self.member = member
        self.callback_of = callback_of
        self.chords = chords
        self.send = send
        self.token = wire.claim_token(member.index) if member is not None else ""
        self.run_lease: float | None = None  # set: run a chord member once (run_once)
        self.holds_run = False

    def run_once(self, lease: float) -> None:
        """Run this chord member's handler once per chord through the chord store, for
        a handler without an idempotency store: a claim ``run:<index>`` held for
        ``lease`` seconds while it runs, *sent* once it succeeded. A later copy of the
        member (the chord published twice) finds it *sent* and skips the handler, as a
        duplicate; one that arrives while it runs waits for it."""
        self.run_lease = lease

    async def _take_run(self) -> bool:
        """Whether this delivery runs the handler: True if it holds the member's run
        claim now, False if the member succeeded before (:class:`RetryLater` while
        another delivery of it runs, up to :data:`SAME_WAIT` seconds)."""
        member, chords, lease = self.member, self.chords, self.run_lease
        assert member is not None and chords is not None and lease is not None
        kind = wire.run_kind(member.index)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SAME_WAIT
        while (found := await chords.claim(member.group_id, kind, self.token, lease)) != wire.NEW:
            if found == wire.SENT:
                return False
            if loop.time() >= deadline:
                raise RetryLater(SAME_RETRY)
            await asyncio.sleep(0.1)
        self.holds_run = True
        return True

    async def release_run(self) -> None:
        """The handler failed (retried, dead-lettered): give the run claim up, so that
        the next delivery of the member runs it without waiting for the lease."""
        member, chords = self.member, self.chords
        if not self.holds_run or member is None or chords is None:
            return
        self.holds_run = False
        try:
            await chords.release(member.group_id, wire.run_kind(member.index), self.token)
        except Exception as exc:
            log.warning("chord %s: member run not released (%s); its lease ends it",
                        member.group_id, exc)  # fmt: skip

    def around(self, call: Callable[[], Awaitable[Any]], effects: Effects) -> Callable[[], Any]:
        """``call`` (the handler), then its result kept and a chain's next step queued."""

        async def run() -> None:
            if self.member is not None and self.chords is None:
                raise PermanentError(
                    f"message {self.message_id} is a member of chord {self.member.group_id}, "
                    "and this app has no status store to count it in: App(status=...)"
                )
            if self.run_lease is not None and not await self._take_run():
                return  # succeeded before (the chord published twice): counted below
            result = await call()
            if self.chords is not None:  # kept only with a status store (else ignored)
                data = wire.encode_result(result)
                if data is not None:
                    await self.chords.put_result(self.message_id, data)
            if self.chain:
                effects.follow_ups.append(self.next_step(effects.correlation_id))

        return run

    def wrap(self, call: Callable[[], Awaitable[Any]], ctx: Any) -> Callable[[], Any]:
        """:meth:`around`, as a wrapper of the handler call (``Job.wrap_call``)."""
        return self.around(call, ctx.effects)

    def next_step(self, correlation_id: str | None) -> FollowUp:
        """The chain's next step, as a follow-up of this one (its id derived from this
        step's, so a step handled twice publishes the same next step)."""
        assert self.chain
        step, rest = self.chain[0], self.chain[1:]
        headers: dict[str, Any] = {}
        if self.group_id is not None:
            headers[h.GROUP] = self.group_id
        if rest:
            headers[wire.CHAIN] = wire.encode_chain(rest)
        return make_follow_up(
            wire.message_of(step),
            incoming_id=self.message_id,
            incoming_correlation=correlation_id,
            origin=self.message_id,
            position=0,  # ctx.publish's follow-ups count from 1
            headers=headers,
        )

    async def succeeded(self) -> None:
        """The handler succeeded (or had, for a duplicate): count a chord member, and
        send the callback if the chord is complete."""
        member, chords = self.member, self.chords
        if member is None or chords is None:
            return
        if self.holds_run:  # before the mark: a copy that finds it sent skips the handler
            await chords.sent(member.group_id, wire.run_kind(member.index))
            self.holds_run = False
        done = await chords.mark(member.group_id, member.index, self.message_id)
        if done >= member.total:
            await self.send_once(wire.THEN, member.then)

    async def dead_lettered(self) -> None:
        """The delivery goes to the DLQ: a chord member sends ``on_failure`` once. A
        failure to send is logged; the member's replay (or a later member) sends it."""
        member = self.member
        if member is None or member.on_failure is None or self.chords is None:
            return
        try:
            await self.send_once(wire.FAILURE, member.on_failure)
        except Exception as exc:
            log.warning(
                "chord %s: on_failure not sent (%s); the next member dead-lettered sends it",
                member.group_id,
                exc,
            )

    async def send_once(self, kind: str, step: wire.Step) -> None:
        """Send the chord's ``kind`` message unless it was sent or another member holds
        the claim; return only once it is confirmed and recorded as sent. Held by another
        delivery of this same member: wait for it a moment, then :class:`RetryLater`
        (no attempt used): it finishes, or its lease runs out and this one sends."""
        member, chords = self.member, self.chords
        assert member is not None and chords is not None
        gid = member.group_id
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SAME_WAIT
        while (found := await chords.claim(gid, kind, self.token, CLAIM_LEASE)) == wire.SAME:
            if loop.time() >= deadline:
                raise RetryLater(SAME_RETRY)
            await asyncio.sleep(0.1)
        if found != wire.NEW:  # sent, or held by another member, which will send it
            return
        callback = FollowUp(
            message=wire.message_of(step),
            message_id=wire.callback_id(gid, kind),
            correlation_id=gid,
            headers={h.CALLBACK_OF: gid},
        )
        try:
            await self.send([callback])
        except BaseException:
            # Not confirmed: give the claim up, so that this member's retry (a new
            # delivery, a new nonce) need not wait for the lease. Best effort.
            try:
                await asyncio.shield(chords.release(gid, kind, self.token))
            except Exception as exc:
                log.warning("chord %s: claim not released (%s); its lease ends it", gid, exc)
            raise
        await chords.sent(gid, kind)

    async def results(self) -> list[Any]:
        """In a chord's callback: the members' results by index (None for a member that
        returned nothing)."""
        if self.callback_of is None or self.chords is None:
            raise PermanentError(
                "ctx.chord_results() works in a chord's callback, on an app with a status store"
            )
        return [r for _, _, r in await self.chords.results(self.callback_of)]


def flow_of(
    headers: Mapping[str, Any],
    message_id: Callable[[], str],
    chords: ChordStore | None,
    send: Send,
) -> Flow | None:
    """The delivery's :class:`Flow`, or None when it has nothing to do (pure);
    ``message_id()`` is called only when there is one."""
    group_id = h.text_header(headers, h.GROUP)
    callback_of = h.text_header(headers, h.CALLBACK_OF)
    if group_id is None and callback_of is None and chords is None and wire.CHAIN not in headers:
        return None
    try:
        chain = wire.chain_of(headers)
        member = wire.chord_of(headers, group_id)
    except (ValueError, TypeError, KeyError, IndexError) as exc:
        raise PermanentError(f"malformed workflow header: {exc!r}") from None
    return Flow(
        message_id=message_id(),
        group_id=group_id,
        chain=chain,
        member=member,
        callback_of=callback_of,
        chords=chords,
        send=send,
    )


# The headers that make a delivery a workflow's (flow_of reads them).
_WORKFLOW_HEADERS = frozenset({h.GROUP, h.CALLBACK_OF, wire.CHAIN})


class WorkflowStage:
    """The stage of workflows, in every app's list before the decode stage (a chain's
    step can arrive at any queue): a delivery with no workflow header, in an app
    without a status store, passes through at the cost of a few header lookups.

    A malformed workflow header is dead-lettered. A delivery with a :class:`Flow`
    has its handler call wrapped (:meth:`Flow.around`), its success counted
    (:meth:`Flow.succeeded`: a failure there is a failed attempt) and its dead letter
    reported (:meth:`Flow.dead_lettered`)."""

    __slots__ = ("chords", "send")

    def __init__(self, chords: ChordStore | None, send: Send) -> None:
        self.chords = chords
        self.send = send

    def __call__(self, job: Job, call_next: Next) -> Awaitable[Outcome]:
        headers = job.delivery.headers
        if self.chords is None and (not headers or not _WORKFLOW_HEADERS & headers.keys()):
            return call_next(job)  # the fast path: no coroutine of its own
        return self._run(job, call_next)

    async def _run(self, job: Job, call_next: Next) -> Outcome:
        try:
            flow = flow_of(job.headers, lambda: job.message_id, self.chords, self.send)
        except PermanentError as exc:  # a malformed workflow header: dead-lettered
            return failed(RetryPolicy(), job.type_name, job.attempt, exc)
        if flow is None:
            return await call_next(job)
        job.flow = flow
        handler = job.handler
        if flow.member is not None and handler is not None and handler.idempotency is None:
            flow.run_once(lease_for(handler.timeout))  # the chord store keeps it once
        job.wrap_call(flow.wrap)
        started = time.perf_counter()
        try:
            outcome = await call_next(job)
        except BaseException:
            with contextlib.suppress(BaseException):  # best effort: else its lease ends it
                await asyncio.shield(flow.release_run())
            raise
        if outcome.decision is ACK:
            try:  # count a chord member; its callback once complete
                await flow.succeeded()
            except Exception as failure:
                await flow.release_run()  # not recorded as run: its retry runs it again
                return job.fail(failure, time.perf_counter() - started)
        else:
            await flow.release_run()
            if isinstance(outcome.decision, DeadLetter):
                await flow.dead_lettered()
        return outcome
