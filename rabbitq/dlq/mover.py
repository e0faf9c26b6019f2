"""Moving DLQ messages: publish a copy, and ack the original once the copy is confirmed."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable

from aio_pika.abc import AbstractChannel, AbstractIncomingMessage

from .._amqp.confirm import send_confirmed
from .._amqp.copy import Copy
from ..errors import PublishInterrupted, PublishNacked, Unroutable
from ..tracing.base import NO_SEND, SendSpan
from .reader import Reader
from .tally import Progress, Tally


async def _traced(span: SendSpan, sending: Awaitable[None]) -> None:
    """Await ``sending`` and end ``span`` with its result."""
    try:
        await sending
    except BaseException as exc:
        span.end(exc)
        raise
    span.end()


class Mover:
    """Publishes copies with pipelined confirms and acks each original once its copy is
    confirmed. Keeps the numbers that say what a lost connection may have duplicated."""

    def __init__(
        self,
        reader: Reader,
        channel: AbstractChannel,
        tally: Tally,
        *,
        window: int,
        on_progress: Progress | None,
    ) -> None:
        self.reader = reader
        self.channel = channel
        self.tally = tally
        self.window = asyncio.Semaphore(window)
        self.barrier_every = window
        self.on_progress = on_progress
        self.tasks: set[asyncio.Task[None]] = set()
        self.missing: set[str] = set()
        self.published = 0  # copies handed to the broker
        self.not_stored = 0  # copies the broker refused: their originals stay, no duplicate
        self.acks_sent = 0
        self.acks_proven = 0  # acks known to be processed (a round trip came back after)
        self.lost: BaseException | None = None
        self._barrier: asyncio.Task[None] | None = None
        reader.on_lost.append(self._abort)

    def _abort(self) -> None:
        """The connection is gone: stop waiting for confirms and acks that may never
        come (what they did is accounted for by :attr:`unsettled`)."""
        self.lost = self.lost or self.reader.lost
        for task in list(self.tasks):
            task.cancel()
        if self._barrier is not None:
            self._barrier.cancel()

    @property
    def unsettled(self) -> int:
        """Copies that may be stored while their original may still be in the DLQ."""
        return self.published - self.not_stored - self.acks_proven

    async def submit(
        self,
        delivery: AbstractIncomingMessage,
        copy: Copy,
        target: str,
        span: SendSpan = NO_SEND,
    ) -> None:
        """Start moving one message; waits while ``window`` copies are in flight, and
        while ``window`` acks wait for their proof: so at most 2 x ``window`` copies can
        be unsettled when the connection drops."""
        barrier = self._barrier
        if barrier is not None and self.acks_sent - self.acks_proven >= self.barrier_every:
            await asyncio.wait({barrier})
        await self.window.acquire()
        if self.lost is not None:
            self.window.release()
            span.end(self.lost)
            return
        task = asyncio.create_task(self._move(delivery, copy, target, span))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _move(
        self, delivery: AbstractIncomingMessage, copy: Copy, target: str, span: SendSpan
    ) -> None:
        try:
            self.published += 1
            try:
                await _traced(
                    span, send_confirmed(self.channel, "", target, copy.body, copy.properties)
                )
            except Unroutable:
                self.not_stored += 1
                self.missing.add(target)
                self.tally.fail(f"queue {target!r} does not exist")
                return  # the original stays unacked and goes back to the DLQ at the end
            except PublishNacked:
                self.not_stored += 1
                self.tally.fail(f"the broker refused the copy for {target!r}")
                return
            except PublishInterrupted as exc:
                self.lost = self.lost or exc
                return
            try:
                await self.reader.ack(delivery)
            except Exception as exc:  # the channel or connection is gone
                self.lost = self.lost or exc
                self.tally.done += 1
                return
            self.acks_sent += 1
            self.tally.done += 1
            if self.acks_sent - self.acks_proven >= self.barrier_every and self._barrier is None:
                self._barrier = asyncio.create_task(self._prove())
        finally:
            self.window.release()
            if self.on_progress is not None:
                self.on_progress(self.tally)

    async def _prove(self) -> None:
        sent = self.acks_sent
        try:
            await self.reader.settled()
            self.acks_proven = max(self.acks_proven, sent)
        except Exception as exc:
            self.lost = self.lost or exc
        finally:
            self._barrier = None

    async def finish(self) -> None:
        """Wait for every copy in flight, then prove every ack sent."""
        while self.tasks:
            await asyncio.gather(*self.tasks, return_exceptions=True)
        if self._barrier is not None:
            await asyncio.gather(self._barrier, return_exceptions=True)
        if self.lost is None and self.acks_sent > self.acks_proven:
            await self._prove()


class Pacer:
    """Spaces out work to ``rate`` per second (no limit when None)."""

    def __init__(self, rate: float | None) -> None:
        self.rate = rate
        self.count = 0
        self.start = time.monotonic()

    async def wait(self) -> None:
        """Return when the next piece of work is due."""
        if self.rate:
            delay = self.start + self.count / self.rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
        self.count += 1
