"""Stopping: starting something that a stop request may overtake (a worker still
connecting), the deliveries a worker holds, and draining them."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Coroutine
from typing import Any, Protocol

from ..hooks import Hooks

log = logging.getLogger("rabbitq.worker")


class Unsettled(set[asyncio.Task[None]]):
    """The tasks of ``queue``'s deliveries, from arrival until settled (acked, or
    returned): what the drain waits for, and, counted, what RabbitMQ counts as unacked
    for this worker. ``hooks`` hear each change of its size (``unacked_changed``:
    ``rabbitq_messages_unacked``, which the autoscaling recipe adds to the ready
    messages, since a busy fleet holds its work unacked)."""

    def __init__(self, hooks: Hooks, queue: str) -> None:
        super().__init__()
        self._hooks = hooks
        self._queue = queue

    def add(self, task: asyncio.Task[None]) -> None:
        super().add(task)
        self._hooks.unacked_changed(self._queue, len(self))

    def discard(self, task: object) -> None:
        if task in self:
            super().discard(task)
            self._hooks.unacked_changed(self._queue, len(self))


async def unless_stopped(work: Coroutine[Any, Any, None], stop: asyncio.Event) -> bool:
    """Run ``work`` to its end (True; its error is raised), unless ``stop`` is set first:
    then ``work`` is cancelled and awaited, and the answer is False.

    A signal must stop a worker in every state, connecting and reconnecting included:
    this is what lets SIGTERM end a worker whose first connection does not answer.
    """
    working = asyncio.ensure_future(work)
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({working, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    if working.done():
        working.result()
        return True
    working.cancel()
    await asyncio.gather(working, return_exceptions=True)
    return False


async def drain(
    tasks: set[asyncio.Task[None]], handling: set[asyncio.Task[None]], grace: float, settle: float
) -> None:
    """Let the deliveries in flight (``tasks``) finish within ``grace`` seconds; then
    cancel those still in their handler (``handling``: each returns its message to the
    queue), give the rest ``settle`` seconds to settle, and cancel what is left."""
    if tasks:
        log.info("waiting up to %gs for %d in-flight handler(s)", grace, len(tasks))
        await asyncio.wait(list(tasks), timeout=grace)
    late = [t for t in handling if not t.done()]
    if late:
        log.warning("grace period over: returning %d message(s) to the queue", len(late))
        for task in late:
            task.cancel()  # the task nacks its delivery with requeue
    if tasks:
        await asyncio.wait(list(tasks), timeout=settle)
        for task in [t for t in tasks if not t.done()]:
            task.cancel()


class Startable(Protocol):
    """What :func:`run_until_stopped` runs: a worker, one partition's or a whole app's."""

    grace_period: float

    async def start(self) -> None: ...
    async def shutdown(self) -> None: ...


async def run_until_stopped(
    runner: Startable, stop: asyncio.Event, *, install_signal_handlers: bool
) -> None:
    """Start ``runner``, wait until ``stop`` is set (or SIGTERM/SIGINT, with
    ``install_signal_handlers``), then shut it down; a stop while it starts cancels the
    start."""
    loop = asyncio.get_running_loop()

    def on_signal(sig: signal.Signals) -> None:
        if stop.is_set():
            log.warning("%s again: still draining (grace period %gs)", sig.name,
                        runner.grace_period)  # fmt: skip
            return
        log.info("%s received: draining", sig.name)
        stop.set()

    signals = (signal.SIGTERM, signal.SIGINT) if install_signal_handlers else ()
    for sig in signals:
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        if await unless_stopped(runner.start(), stop):  # SIGTERM while connecting
            await stop.wait()
    finally:
        await runner.shutdown()
        for sig in signals:
            loop.remove_signal_handler(sig)
