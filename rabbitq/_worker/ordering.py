"""Ordered handlers (``@app.handler(M, ordered_by=...)``): one message of a key at a
time, in delivery order, a failed one retried before the next (docs/ordering.md).

The worker calls :meth:`Ordering.arrive` for each job *as it arrives* (in the broker's
order, before anything awaits), which queues it behind the earlier deliveries of its
key; the :class:`Ordering` stage (after the breaker's) waits for its turn, then runs the
rest of the stage list, and on a retry waits the retry's delay *in the worker, holding
the key*, and runs it again as the next attempt. The turn passes on when the delivery is
settled (its task is done: acked, or its dead letter confirmed), so the next message of
the key never starts before the earlier one's outcome is safe.

After the last attempt the message is dead-lettered; with ``on_dead="block"`` its key
is then blocked: every later delivery of the key goes straight to the DLQ behind it
(reason ``blocked``), never held in the worker, so a blocked key cannot fill the
prefetch. The message that blocked it, replayed from the DLQ (``rabbitq dlq replay``),
unblocks it and runs; any other replayed message of the key goes back behind it, unless
the replay was marked ``--unblock``. Which key a delivery has, whether it lifts a block
and what to do with a blocked one are pure (:func:`key_of`, :func:`lifts_block`,
:func:`blocked_outcome`).

The key is the one the publisher computed on the clear message and wrote into the
``rabbitq-key`` header (the header partitions route on, :mod:`rabbitq._amqp.partitions`),
so an encrypted or offloaded body is never decoded for it; a delivery without the header
(another producer, an older message) has its key computed from its body. One whose key
cannot be known as it arrives (no header, and a body that is ciphertext, in a blob
store, or whose key function raises) is never run unordered: it is logged and runs
alone, after every earlier ordered delivery and before any later one (a *barrier*; its
dead letter blocks no key).

Blocked keys are also kept in the broker (:mod:`rabbitq._worker.blocked_keys`), read
before the first ordered delivery of each consume channel goes, so that a restart or
another process taking over keeps them.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from .. import retry
from .._amqp import headers as h
from .._amqp.partitions import KEY_HEADER
from .._amqp.topology import blocked_queue_name
from ..errors import DecodeError
from ..handler import Handler
from ..hooks import Hooks
from ..job import Job, Next
from ..message import decode
from ..outcome import DeadLetter, Outcome, Retry
from ..payloads.reference import BLOB
from .blocked_keys import BlockedKeys, Connected
from .consumer_timeout import DEFAULT_CONSUMER_TIMEOUT

log = logging.getLogger("rabbitq.worker")

BLOCKED = retry.BLOCKED
"""The DLQ reason of a message whose key is blocked (``on_dead="block"``)."""


class _Unknown:
    """The key of a delivery that cannot be known as it arrives (see :func:`key_of`)."""

    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Final = _Unknown()
""":func:`key_of` of an ordered delivery whose key cannot be known: it runs alone."""


def key_of(
    handler: Handler | None, body: bytes, headers: Mapping[str, Any] | None = None
) -> str | _Unknown | None:
    """The ordering key of a delivery for ``handler`` (pure): the ``rabbitq-key`` header
    the publisher wrote (computed on the clear message), else ``ordered_by`` of its
    decoded body, as text. None when the handler is not ordered, or for a clear body
    that does not decode (it is dead-lettered as ``invalid`` without waiting for a
    turn); :data:`UNKNOWN` when the key cannot be known: no header, and a body that is
    encrypted or in a blob store, or a key function that raises."""
    if handler is None or handler.ordered_by is None:
        return None
    headers = headers or {}
    key = h.text_header(headers, KEY_HEADER)
    if key is not None:
        return key
    if headers.get(h.KEY_ID) is not None or headers.get(BLOB) is not None:
        return UNKNOWN  # ciphertext, or the empty body of an offloaded message
    try:
        message = decode(body, handler.model)
    except DecodeError:
        return None
    try:
        return str(handler.ordered_by(message))
    except Exception:  # a key function that raises: no key, but never unordered
        return UNKNOWN


def hold_problems(handlers: Mapping[str, Handler], consumer_timeout: float | None) -> list[str]:
    """One line per ordered handler whose retries, held in the worker, could outlast the
    broker's ``consumer_timeout`` (pure): its delays plus each attempt's timeout."""
    problems = []
    for name, handler in sorted(handlers.items()):
        if handler.ordered_by is None or not consumer_timeout:
            continue
        hold = sum(handler.retry.delays) + handler.retry.attempts * (handler.timeout or 0)
        if hold > consumer_timeout * 0.9 or handler.timeout is None:
            problems.append(
                f"ordered handler for {name!r} may hold a message {hold:g}s or more (its "
                f"retry delays and {handler.retry.attempts} attempts' timeouts, waited in "
                f"the worker), near or past the broker's consumer_timeout "
                f"({consumer_timeout:g}s): shorten its delays or timeout (docs/ordering.md)"
            )
    return problems


def lifts_block(headers: Mapping[str, Any], message_id: str, dead: str) -> bool:
    """Whether a delivery of a blocked key lifts the block (pure): only a replay of the
    message that blocked it (``dead``), or a replay the operator marked
    ``rabbitq-unblock`` (``rabbitq dlq replay --unblock``). Any other message of the
    key, replayed or not, goes back to the DLQ behind it: a failed message of a key is
    never overtaken."""
    if not headers.get(h.REPLAYED):
        return False
    return message_id == dead or bool(headers.get(h.UNBLOCK))


def blocked_outcome(key: str, dead: str, type_name: str, attempt: int) -> Outcome:
    """The dead letter of a delivery whose key is blocked behind ``dead`` (pure)."""
    error = (
        f"KeyBlocked: key {key!r} is blocked since message {dead} was dead-lettered "
        f"(on_dead='block'); replay that message from the DLQ to unblock it"
    )
    return Outcome(DeadLetter(BLOCKED), type_name, attempt, error=h.truncate_utf8(error, 1024))


class Turn:
    """One delivery's place in its key's line (``key`` None: a barrier, every key's)."""

    __slots__ = ("_before", "_mine", "delivery", "key")

    def __init__(
        self, key: str | None, before: Sequence[asyncio.Future[None]], delivery: object
    ) -> None:
        self.key = key
        self.delivery = delivery
        self._before = tuple(before)
        self._mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def wait(self) -> None:
        """Until every earlier delivery of the key (of every key: a barrier) is settled."""
        for before in self._before:
            if not before.done():
                await asyncio.shield(before)

    def done(self) -> None:
        """This delivery is settled: the next of its key may go."""
        if not self._mine.done():
            self._mine.set_result(None)


class Ordering:
    """The lines of keys of one worker, and the keys blocked there."""

    def __init__(
        self,
        queue: str,
        handlers: Mapping[str, Handler],
        hooks: Hooks,
        connection: Connected | None = None,
    ) -> None:
        self.queue = queue
        self.handlers = handlers
        self.hooks = hooks
        self._tails: dict[str, Turn] = {}  # key -> its last delivery's turn
        self._turns: dict[Job, Turn] = {}  # arrived, not yet at this stage
        self._barrier: Turn | None = None  # the last delivery of no known key, unsettled
        self.blocked: dict[str, str] = {}  # key -> the message id of its dead letter
        self.running = 0  # ordered deliveries inside their handler now
        self.idle = asyncio.Event()  # set while none is (worker.partitioned waits for it)
        self.idle.set()
        self.frozen = False  # stopping: no delivery starts any more (worker.partitioned)
        # on_dead="block" with a broker: the blocked keys are kept in <queue>.blocked too
        blocking = any(handler.on_dead == "block" for handler in handlers.values())
        self.registry = (
            BlockedKeys(blocked_queue_name(queue), connection)
            if blocking and connection is not None
            else None
        )

    @classmethod
    def wanted(
        cls,
        queue: str,
        handlers: Mapping[str, Handler],
        hooks: Hooks,
        consumer_timeout: float | None = None,
        connection: Connected | None = None,
    ) -> Ordering | None:
        """An :class:`Ordering` if some handler is ordered, else None (no cost at all);
        a warning per handler whose held retries could outlast ``consumer_timeout``
        (None: RabbitMQ's default; 0: the broker has none). ``connection``: the worker's,
        where blocked keys are kept (:mod:`rabbitq._worker.blocked_keys`)."""
        if not any(handler.ordered_by is not None for handler in handlers.values()):
            return None
        limit = DEFAULT_CONSUMER_TIMEOUT if consumer_timeout is None else consumer_timeout
        for problem in hold_problems(handlers, limit):
            log.warning("%s", problem)
        return cls(queue, handlers, hooks, connection)

    def arrive(self, job: Job) -> Callable[[object], None] | None:
        """Queue ``job`` behind the earlier deliveries of its key (called as it arrives,
        before any await, in delivery order); the callback to call once it is settled
        (its task is done), or None: it is not ordered."""
        key = key_of(job.handler, job.delivery.body, job.headers)
        if key is None:
            return None
        if isinstance(key, _Unknown):
            turn = self._barrier_turn(job)
        else:
            tail = self._tails.get(key) or self._barrier
            turn = Turn(key, () if tail is None else (tail._mine,), job)
            self._tails[key] = turn
        self._turns[job] = turn
        return functools.partial(self.settled, turn)

    def _barrier_turn(self, job: Job) -> Turn:
        """The turn of a delivery whose key cannot be known: after every earlier ordered
        delivery, and every later one after it."""
        log.warning(
            "message %s (%s): its ordering key cannot be known as it arrives (no %s "
            "header, and its body is encrypted, offloaded or its key function raises); it "
            "runs alone, after every earlier ordered message and before any later one",
            job.delivery.message_id or "-", job.type_name, KEY_HEADER,
        )  # fmt: skip
        before = [tail._mine for tail in self._tails.values()]
        if self._barrier is not None:
            before.append(self._barrier._mine)
        turn = self._barrier = Turn(None, before, job)
        self._tails.clear()  # each later delivery waits for the barrier, which waits for them
        return turn

    def settled(self, turn: Turn, _task: object = None) -> None:
        """``turn``'s delivery is settled (its task is done)."""
        turn.done()
        self._turns.pop(turn.delivery, None)  # type: ignore[call-overload]  # never processed
        if turn.key is None:
            if self._barrier is turn:
                self._barrier = None
        elif self._tails.get(turn.key) is turn:
            del self._tails[turn.key]

    async def __call__(self, job: Job, call_next: Next) -> Outcome:
        """The ordering stage: the rest of the list in the key's order, retries held."""
        turn = self._turns.pop(job, None)
        if self.frozen:
            await asyncio.Event().wait()  # stopping: it never starts (returned at close)
        if turn is None:
            return await call_next(job)
        await turn.wait()
        while self.frozen:
            await asyncio.Event().wait()
        channel = getattr(job.delivery, "channel", None)
        if self.registry is not None and self.registry.stale(channel):
            await self._read_registry(channel)
        dead = None if turn.key is None else self.blocked.get(turn.key)
        if dead is not None and turn.key is not None:
            if not lifts_block(job.headers, job.message_id, dead):
                return blocked_outcome(turn.key, dead, job.type_name, job.attempt)
            await self._unblock(turn.key)
        self.running += 1
        self.idle.clear()
        try:
            while True:
                outcome = await call_next(job)
                decision = outcome.decision
                if not isinstance(decision, Retry):
                    break
                # The retry waits here, holding its key: nothing later of it overtakes.
                self.hooks.retried(self.queue, job.type_name, decision.label, outcome.duration)
                log.info(
                    "message %s failed (%s); attempt %d in %gs, holding key %r",
                    job.delivery.message_id or "-", outcome.error, decision.next_attempt,
                    decision.delay_ms / 1000, turn.key,
                )  # fmt: skip
                await asyncio.sleep(decision.delay_ms / 1000)
                job.attempt = decision.next_attempt
        finally:
            self.running -= 1
            if not self.running:
                self.idle.set()
        handler = job.handler
        if isinstance(outcome.decision, DeadLetter) and handler and handler.on_dead == "block":
            if turn.key is not None:
                await self._block(turn.key, job.message_id)
            else:
                log.error(
                    "message %s dead-lettered with on_dead='block', but its key is not "
                    "known (no %s header): no key blocked", job.message_id, KEY_HEADER,
                )  # fmt: skip
        return outcome

    async def _read_registry(self, channel: object) -> None:
        """Take the blocked keys from the registry: what the process that was active
        before (or this one, before a restart) blocked."""
        assert self.registry is not None
        before = dict(self.blocked)
        found = await self.registry.read(channel)
        if found is None:
            return  # another delivery read it for this channel meanwhile
        # What this process blocked or unblocked while the scan ran is newer than the
        # scan: a scan begun before a block must not unblock its key.
        now = self.blocked
        unblocked = before.keys() - now.keys()
        merged = {key: dead for key, dead in found.items() if key not in unblocked}
        merged.update((key, dead) for key, dead in now.items() if before.get(key) != dead)
        for key, dead in merged.items():
            if before.get(key) != dead and now.get(key) != dead:
                log.error(
                    "key %r is blocked: message %s was dead-lettered (on_dead='block', "
                    "kept in %r); its later messages go to the DLQ behind it until it is "
                    "replayed", key, dead, self.registry.name,
                )  # fmt: skip
        self.blocked = merged
        self.hooks.keys_blocked(self.queue, tuple(self.blocked))

    async def _block(self, key: str, message_id: str) -> None:
        if self.registry is not None:  # kept in the broker first, before the dead letter
            await self.registry.add(key, message_id)
        self.blocked[key] = message_id
        log.error(
            "key %r blocked: message %s was dead-lettered (on_dead='block'); its later "
            "messages go to the DLQ behind it until it is replayed",
            key, message_id,
        )  # fmt: skip
        self.hooks.keys_blocked(self.queue, tuple(self.blocked))

    async def _unblock(self, key: str) -> None:
        if self.registry is not None:
            await self.registry.remove(key)
        self.blocked.pop(key, None)
        log.warning(
            "key %r unblocked: the message that blocked it was replayed from the DLQ (or "
            "a replay marked --unblock)", key,
        )  # fmt: skip
        self.hooks.keys_blocked(self.queue, tuple(self.blocked))

    def freeze(self) -> None:
        """Start nothing any more (a partition worker stopping: see worker.partitioned)."""
        self.frozen = True
