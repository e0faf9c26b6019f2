"""``rabbitq worker --processes N``: a supervisor process and N worker processes.

Each worker process is a whole worker (its own connection, ``prefetch`` handlers,
its own graceful drain), built and run by :func:`rabbitq._ops.run.run_child`, the same
wiring as a single ``rabbitq worker``; they compete for the same queue. The supervisor
only starts, watches and stops them; it

- checks the broker and declares the topology once, so that a bad URL or a changed
  queue argument is one clear error before anything starts (a broker not up yet is
  waited for, as a worker waits: rabbitq._amqp.start_retry);
- starts the workers (``spawn``: a fresh interpreter each, no fork of a threaded
  process) and restarts one that dies, after a backoff that grows while it keeps dying;
- serves ``/metrics`` summed over the workers through prometheus-client's
  multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``: a temporary directory of its own),
  and ``/healthz`` and ``/readyz`` from what each worker reports in shared memory
  (an event-loop heartbeat and its readiness);
- on SIGTERM/SIGINT, sends SIGTERM to every worker, waits for their drains and
  exits 0.

A worker process stops by itself (draining) if the supervisor disappears.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import multiprocessing
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess
from types import FrameType

from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

from .._amqp.connection import connect
from .._amqp.start_retry import until_started
from .._amqp.topology import Topology, declare
from ..loader import load_app
from ..settings import TLS
from .endpoints import DEFAULT_STALL_AFTER, EndpointServer
from .run import Child, WorkerSpec, run_child
from .status import REPORT_INTERVAL, state_reason

log = logging.getLogger("rabbitq.supervisor")

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
# How long after the grace period the supervisor waits for a draining worker before
# killing it: returning late messages, closing the connection, the interpreter's exit.
EXIT_MARGIN = 15.0
# Restart backoff: 1 s, doubling while a worker keeps dying young, at most 30 s.
RESTART_BACKOFF = 1.0
MAX_RESTART_BACKOFF = 30.0
STABLE_AFTER = 30.0  # a worker that lived this long resets the backoff


def restart_delay(failures: int) -> float:
    """Seconds before restarting a worker that has died ``failures`` times in a row."""
    return float(min(MAX_RESTART_BACKOFF, RESTART_BACKOFF * 2 ** max(0, failures - 1)))


@dataclass
class _Slot:
    """One of the N worker places, and the process that fills it now."""

    number: int  # 1-based, for logs
    process: BaseProcess | None = None
    started: float = 0.0
    failures: int = 0
    restart_at: float | None = None


class Supervisor:
    """Runs ``processes`` worker processes for ``spec`` until SIGTERM/SIGINT."""

    def __init__(
        self,
        spec: WorkerSpec,
        *,
        processes: int,
        stall_after: float = DEFAULT_STALL_AFTER,
    ) -> None:
        self.spec = spec
        # The supervisor serves the endpoints; its workers only report to it.
        self.child_spec = dataclasses.replace(spec, metrics_port=None)
        self.processes = processes
        self.metrics_port = spec.metrics_port
        self.metrics_bind = spec.metrics_bind
        self.stall_after = stall_after
        self.server: EndpointServer | None = None
        self._ctx = multiprocessing.get_context("spawn")
        self._status = self._ctx.RawArray("d", 2 * processes)
        self._slots = [_Slot(number=i + 1) for i in range(processes)]
        self._stop_signal: signal.Signals | None = None
        self._draining = False
        self._metrics_dir = ""

    # -- running ------------------------------------------------------------------

    def run(self) -> int:
        """Check the broker, run the workers until a signal, drain them; the exit
        status (0 when every worker drained cleanly)."""
        app = load_app(self.spec.app_spec)
        url = app.resolved_url(self.spec.url)
        asyncio.run(_declare(app.topology(), url, self.spec.tls or app.tls, self.spec.start_wait))
        previous = {
            sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)
        }
        try:
            with self._metrics_directory(), self._endpoints():
                for slot in self._slots:
                    self._start(slot)
                while self._stop_signal is None:
                    self._watch()
                return self._drain()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        sig = signal.Signals(signum)
        if self._stop_signal is not None:
            log.warning("%s again: still draining the workers", sig.name)
            return
        self._stop_signal = sig

    @contextlib.contextmanager
    def _metrics_directory(self) -> Iterator[None]:
        self._metrics_dir = tempfile.mkdtemp(prefix="rabbitq-metrics-")
        try:
            yield
        finally:
            shutil.rmtree(self._metrics_dir, ignore_errors=True)

    @contextlib.contextmanager
    def _endpoints(self) -> Iterator[None]:
        if self.metrics_port is None:
            yield
            return
        registry = CollectorRegistry()
        # (prometheus-client's multiprocess functions carry no annotations)
        MultiProcessCollector(registry, path=self._metrics_dir)  # type: ignore[no-untyped-call]
        self.server = EndpointServer(
            registry,
            live=self.not_live,
            ready=self.not_ready,
            port=self.metrics_port,
            bind=self.metrics_bind,
        )
        self.server.start()
        log.info(
            "serving metrics of %d worker processes on %s (and /healthz, /readyz; "
            "listening on %s:%d)",
            self.processes,
            self.server.url,
            self.metrics_bind,
            self.server.port,
        )
        try:
            yield
        finally:
            self.server.close()

    def _start(self, slot: _Slot) -> None:
        i = slot.number - 1
        self._status[2 * i] = 0.0  # no heartbeat yet
        self._status[2 * i + 1] = 0.0  # starting
        child = Child(number=slot.number, status=self._status, index=i, supervisor_pid=os.getpid())
        process = self._ctx.Process(
            target=run_child,
            args=(self.child_spec, child),
            name=f"rabbitq-worker-{slot.number}",
        )
        # the workers find the directory in their environment, read at import
        with _environ(MULTIPROC_ENV, self._metrics_dir):
            process.start()
        slot.process, slot.started, slot.restart_at = process, time.monotonic(), None
        log.info("started worker process %d (pid %s)", slot.number, process.pid)

    def _watch(self, timeout: float = REPORT_INTERVAL) -> None:
        """Wait a little for a worker to exit; restart what is due."""
        live = [s.process.sentinel for s in self._slots if s.process is not None]
        wait(live, timeout=timeout)
        now = time.monotonic()
        for slot in self._slots:
            process = slot.process
            if process is not None and not process.is_alive():
                process.join()
                self._forget(process)
                slot.process = None
                slot.failures = 1 if now - slot.started >= STABLE_AFTER else slot.failures + 1
                delay = restart_delay(slot.failures)
                slot.restart_at = now + delay
                log.error(
                    "worker process %d (pid %s) exited unexpectedly (%s); restarting it in %gs",
                    slot.number,
                    process.pid,
                    _describe_exit(process.exitcode),
                    delay,
                )
            if slot.process is None and slot.restart_at is not None and now >= slot.restart_at:
                if self._stop_signal is None:
                    self._start(slot)

    def _forget(self, process: BaseProcess) -> None:
        """Drop a dead worker's live gauges (its counters still count in the sums)."""
        if process.pid is not None:
            # (untyped in prometheus-client)
            mark_process_dead(process.pid, self._metrics_dir)  # type: ignore[no-untyped-call]

    def _drain(self) -> int:
        self._draining = True
        running = [s.process for s in self._slots if s.process is not None and s.process.is_alive()]
        log.info(
            "%s received: draining %d worker process(es) (grace period %gs)",
            self._stop_signal.name if self._stop_signal else "stop",
            len(running),
            self.spec.grace_period,
        )
        for process in running:
            if process.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.spec.grace_period + EXIT_MARGIN
        status = 0
        for process in running:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                log.error("worker process pid %s did not stop in time: killing it", process.pid)
                process.kill()
                process.join()
                status = 1
            elif process.exitcode not in (0, -signal.SIGTERM):
                log.error(
                    "worker process pid %s ended with %s",
                    process.pid,
                    _describe_exit(process.exitcode),
                )
                status = 1
            self._forget(process)
        log.info("all worker processes stopped")
        return status

    # -- probes -------------------------------------------------------------------

    def not_live(self) -> str | None:
        """A worker whose event loop has stopped beating, else None."""
        now = time.monotonic()
        for i, slot in enumerate(self._slots):
            beat = self._status[2 * i]
            process = slot.process
            if process is not None and beat > 0 and now - beat > self.stall_after:
                return (
                    f"worker process {slot.number} (pid {process.pid}): "
                    f"event loop unresponsive for {now - beat:.1f}s"
                )
        return None

    def not_ready(self) -> str | None:
        """Ready when every worker process is; else the first few reasons."""
        if self._draining or self._stop_signal is not None:
            return "shutting down"
        reasons = []
        for i, slot in enumerate(self._slots):
            if slot.process is None:
                reasons.append(f"worker process {slot.number}: restarting")
                continue
            reason = state_reason(int(self._status[2 * i + 1]))
            if reason is not None:
                reasons.append(f"worker process {slot.number} (pid {slot.process.pid}): {reason}")
        if not reasons:
            return None
        return f"{len(reasons)} of {self.processes} not ready: " + "; ".join(reasons[:3])


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exit status {code}"


@contextlib.contextmanager
def _environ(name: str, value: str) -> Iterator[None]:
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            del os.environ[name]
        else:
            os.environ[name] = old


async def _declare(topology: Topology, url: str, tls: TLS | None, wait: float | None) -> None:
    """Declare the topology once, waiting for the broker as a worker does."""

    async def once() -> None:
        connection = await connect(url, name="rabbitq supervisor", tls=tls)
        try:
            await declare(await connection.channel(), topology)
        finally:
            with contextlib.suppress(Exception):
                await connection.close()

    await until_started(once, url=url, wait=wait)
