"""What a worker made of several workers in one process answers: the partitions of
``App(partitions=N)`` (:class:`~rabbitq._worker.partitioned.PartitionedWorker`) and the
lanes of ``App(priorities=N)`` (:class:`~rabbitq._worker.laned.PriorityWorker`).

It has a worker's interface (``run``, ``stop``, and, in each kind, ``start``,
``shutdown`` and ``health``); for the rest (``app``, ``url``, ``topology``,
``connection``, ...) it answers as its ``first`` worker, which a kind sets up with
``whole`` (the app), ``_hooks`` (the caller's), ``_started`` and ``_stop``.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from typing import Any

from ..app import App
from ..hooks import Hooks
from .lifecycle import Worker
from .stopping import run_until_stopped


class Composite(ABC):
    """The members every kind of composed worker shares (see the module)."""

    grace_period: float
    whole: App
    first: Worker
    _hooks: Hooks
    _started: list[Worker]
    _stop: asyncio.Event

    @property
    def app(self) -> App:
        """The first worker's view of the app."""
        return self.first.app

    @property
    def url(self) -> str:
        """The broker URL every worker connects to."""
        return self.first.url

    @property
    def tls(self) -> Any:
        """The TLS settings every worker connects with."""
        return self.first.tls

    @property
    def hooks(self) -> Hooks:
        """The hooks every worker reports to (the caller's)."""
        return self._hooks

    @property
    def topology(self) -> Any:
        """The first worker's topology (the app's exchanges and its DLQ)."""
        return self.first.topology

    @property
    def keeper(self) -> Any:
        """The first worker's keeper (its copy channel)."""
        return self.first.keeper

    @property
    def connection(self) -> Any:
        """The first worker's connection while it runs."""
        return self.first.connection

    @property
    def ready(self) -> asyncio.Event:
        """Set while the first worker is ready (``health()`` answers for all)."""
        return self.first.ready

    @property
    def started(self) -> list[str]:
        """The queues this process consumes now."""
        return [worker.app.queue for worker in self._started]

    @abstractmethod
    async def start(self) -> None:
        """Start the workers, each kind in its own order."""

    @abstractmethod
    async def shutdown(self) -> None:
        """Stop every worker, each draining as a worker does. Idempotent."""

    def stop(self) -> None:
        """Ask :meth:`run` to stop every worker and return. Signal-safe."""
        self._stop.set()

    async def run(self, *, install_signal_handlers: bool = False) -> None:
        """Start, run until stopped, then stop every worker."""
        await run_until_stopped(self, self._stop, install_signal_handlers=install_signal_handlers)
