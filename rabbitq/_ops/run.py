"""The one place a worker is wired: :func:`run` builds a :class:`~rabbitq.Worker` from
a :class:`WorkerSpec` and runs it until SIGTERM/SIGINT.

``rabbitq worker`` calls it in its own process; with ``--processes N`` the supervisor
calls it in each worker process (:func:`run_child`), so both run on the same event
loop (uvloop when installed, see :mod:`rabbitq._ops.loop`), with the same log set-up,
metrics and exit policy. The differences are explicit: a child reports its heartbeat
and readiness to the supervisor instead of serving HTTP, and writes its metrics to the
supervisor's multiprocess directory.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .._worker.handler_pool import THREAD_PREFIX as HANDLER_THREAD_PREFIX
from .._worker.laned import PriorityWorker
from .._worker.lifecycle import DEFAULT_GRACE_PERIOD, Worker
from .._worker.partitioned import AnyWorker, PartitionedWorker, homes
from ..app import App
from ..hooks import Hooks, combine
from ..loader import load_app
from ..schedule.metrics import ScheduleMetrics
from ..schedule.runner import Scheduler, beside
from ..settings import TLS, url_password
from ..status.metrics import StatusMetrics
from . import logs, loop, queue_watch
from .endpoints import DEFAULT_BIND, serve_metrics
from .metrics import Metrics
from .sampler import DEFAULT_SAMPLE_INTERVAL, sample_queues
from .status import REPORT_INTERVAL, state_code
from .summary import Summary

log = logging.getLogger("rabbitq.worker")


@dataclass(frozen=True, kw_only=True)
class WorkerSpec:
    """Everything that decides how a worker runs (picklable: it crosses to children).

    ``metrics_port`` None: no HTTP endpoints (a supervised child never serves them; its
    supervisor does). ``loop``: ``auto`` (uvloop if installed), ``uvloop`` or
    ``asyncio``. ``exit_if_stuck``: exit without waiting for sync handlers that outlive
    the grace period (see :func:`exit_if_handlers_stuck`).
    """

    app_spec: str
    url: str | None = None
    prefetch: int | None = None
    grace_period: float = DEFAULT_GRACE_PERIOD
    log_level: str = "INFO"
    log_json: bool = False
    log_libraries: str = logs.OFF  # the AMQP client libraries' level (logs.LIBRARIES)
    tls: TLS | None = None
    consumer_timeout: float | None = None
    metrics_port: int | None = None
    metrics_bind: str = DEFAULT_BIND
    sample_interval: float = DEFAULT_SAMPLE_INTERVAL
    loop: str = "auto"
    exit_if_stuck: bool = True
    schedules: bool = True  # run the app's schedules too (rabbitq.schedule)
    start_wait: float | None = None  # retry the start this long (None: until stopped)


@dataclass(frozen=True, kw_only=True)
class Child:
    """How a supervised worker process talks to its supervisor."""

    number: int  # 1-based, for logs
    status: Any  # the supervisor's shared array: [heartbeat, state] per process
    index: int
    supervisor_pid: int

    def report(self, beat: float, code: int) -> None:
        """Write this process's heartbeat and state code."""
        self.status[2 * self.index] = beat
        self.status[2 * self.index + 1] = float(code)


def build(
    spec: WorkerSpec,
    *,
    metrics: Metrics | None,
    child: Child | None = None,
    summary: Summary | None = None,
) -> AnyWorker:
    """The worker ``spec`` describes, reporting to ``summary`` and ``metrics`` (if any)."""
    app = load_app(spec.app_spec)
    if metrics is not None and app.status_writer is not None:  # App(status=...)
        app.status_writer.observers.append(StatusMetrics(metrics.registry))
    home = None
    if child is not None and app.partitions:  # process i of K: its share of partitions
        home = homes(app.partitions, child.index, len(child.status) // 2)
    hooks: list[Hooks] = [h for h in (metrics, summary) if h is not None]
    return worker_for(app, spec, hooks=combine(hooks) if hooks else None, home=home)


def worker_for(
    app: App, spec: WorkerSpec, *, hooks: Hooks | None, home: list[int] | None = None
) -> AnyWorker:
    """A worker for ``app`` (already loaded: the demo builds its own) as ``spec`` says;
    a partitioned app's runs every partition, ``home`` first (worker.partitioned), and
    an app with priorities every lane (worker.laned)."""
    options: dict[str, Any] = {
        "url": spec.url,
        "prefetch": spec.prefetch,
        "grace_period": spec.grace_period,
        "hooks": hooks,
        "tls": spec.tls,
        "consumer_timeout": spec.consumer_timeout,
        "start_wait": spec.start_wait,
    }
    if app.partitions:
        return PartitionedWorker(app, home=home, **options)
    if app.priorities > 1:
        return PriorityWorker(app, **options)
    return Worker(app, **options)


def run(spec: WorkerSpec, *, child: Child | None = None) -> None:
    """Build the worker, run it until SIGTERM/SIGINT (drained), then apply the exit
    policy. Raises what the worker raises (a bad URL, a changed queue argument)."""
    metrics = Metrics() if spec.metrics_port is not None or child is not None else None
    summary = Summary()  # the INFO line every minute: handled N, retried M, ...
    worker = build(spec, metrics=metrics, child=child, summary=summary)
    logs.configure(
        level=spec.log_level,
        json=spec.log_json,
        secrets=[url_password(worker.url) or ""],
        libraries=spec.log_libraries,
    )
    if child is not None:
        assert metrics is not None
        metrics.expect(worker.app)  # (serve_metrics does it in a single process)
        for handler in logging.getLogger().handlers:
            handler.filters.insert(0, _Prefix(child.number))
    scheduler = None
    if spec.schedules and worker.app.schedules:
        registry = None if metrics is None else metrics.registry
        scheduler = Scheduler(
            worker.app, url=spec.url, tls=spec.tls, metrics=ScheduleMetrics(registry)
        )

    async def serving() -> None:
        main = _serve(worker, metrics, spec, child)
        try:
            await (main if scheduler is None else beside(main, scheduler))
        finally:
            summary.flush()  # the last seconds' line

    loop.run(queue_watch.alongside(serving, worker, metrics), loop=spec.loop)  # and its queues
    if spec.exit_if_stuck:
        exit_if_handlers_stuck()


def run_child(spec: WorkerSpec, child: Child) -> None:
    """The body of a supervised worker process (the supervisor's process target)."""
    # Its own process group: a Ctrl-C in the terminal reaches the supervisor only,
    # which then drains every worker once.
    os.setpgrp()
    try:
        run(spec, child=child)
    except Exception as exc:  # one line, as the CLI would say it; the supervisor restarts
        log.error("worker process failed: %s", exc)
        raise SystemExit(1) from None


async def _serve(
    worker: AnyWorker, metrics: Metrics | None, spec: WorkerSpec, child: Child | None
) -> None:
    if metrics is not None and spec.metrics_port is not None:
        async with serve_metrics(
            worker,
            metrics,
            port=spec.metrics_port,
            bind=spec.metrics_bind,
            sample_interval=spec.sample_interval,
        ):
            await worker.run(install_signal_handlers=True)
        return
    if metrics is None or child is None:
        await worker.run(install_signal_handlers=True)
        return
    tasks = [
        asyncio.create_task(_pulse(worker, child.report, child.supervisor_pid)),
        asyncio.create_task(
            sample_queues(
                metrics,
                lambda: worker.connection,
                worker.topology.depth_specs(),
                interval=spec.sample_interval,
            )
        ),
    ]
    try:
        await worker.run(install_signal_handlers=True)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _pulse(
    worker: AnyWorker,
    report: Callable[[float, int], None],
    supervisor_pid: int,
) -> None:
    """Report a heartbeat and readiness; drain if the supervisor is gone."""
    while True:
        report(time.monotonic(), state_code(worker.health()))
        if os.getppid() != supervisor_pid:
            logging.getLogger("rabbitq.supervisor").warning("the supervisor is gone: draining")
            worker.stop()
        await asyncio.sleep(REPORT_INTERVAL)


class _Prefix(logging.Filter):
    """Starts every log line of a worker process with ``[worker N]``."""

    def __init__(self, number: int) -> None:
        super().__init__()
        self.prefix = f"[worker {number}] "

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = self.prefix + record.getMessage(), None
        return True


def exit_if_handlers_stuck(wait: float = 0.25) -> None:
    """Exit now if sync handlers outlived the grace period.

    Their threads cannot be stopped, and the interpreter would wait for them at exit
    (concurrent.futures joins its threads), far past the grace period. Their messages
    are already back in the queue and the connection is closed, so nothing is lost by
    leaving them behind. Idle handler threads end at once and are not waited for.
    """
    deadline = time.monotonic() + wait
    threads = [t for t in threading.enumerate() if t.name.startswith(HANDLER_THREAD_PREFIX)]
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    stuck = sum(1 for t in threads if t.is_alive())
    if stuck:
        log.warning(
            "%d sync handler(s) still running after the grace period: exiting without "
            "waiting for them (their messages were returned to the queue)",
            stuck,
        )
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
