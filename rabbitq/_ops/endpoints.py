"""The worker's HTTP endpoints: ``/metrics``, ``/healthz`` and ``/readyz``.

A stdlib threaded HTTP server in a daemon thread, so that ``/metrics`` and the probes
answer even while the event loop is busy, and ``/healthz`` can tell that it is stuck:
a task on the loop beats every second, and the probe fails when the beat is late.
:func:`serve_metrics` wires it to a :class:`~rabbitq.Worker` and its
:class:`~rabbitq._ops.metrics.Metrics`; the multi-process supervisor gives it probes of
its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from ..errors import ConfigurationError
from .metrics import Metrics
from .sampler import DEFAULT_SAMPLE_INTERVAL, sample_queues

if TYPE_CHECKING:
    pass
from .._worker.partitioned import AnyWorker

log = logging.getLogger("rabbitq.metrics")

# A probe answers None when all is well, else a short reason (the 503 body).
Probe = Callable[[], str | None]

DEFAULT_BIND = "0.0.0.0"  # all interfaces: what a container's port mapping needs
HEARTBEAT_INTERVAL = 1.0
DEFAULT_STALL_AFTER = 10.0  # /healthz fails once the event loop has not run for this long

_TEXT = "text/plain; charset=utf-8"
_INDEX = b"rabbitq worker: /metrics /healthz /readyz\n"


class Heartbeat:
    """The event loop's pulse: :meth:`run` beats on the loop, :meth:`stalled` is read
    from any thread."""

    def __init__(self, stall_after: float = DEFAULT_STALL_AFTER) -> None:
        self.stall_after = stall_after
        self.last = time.monotonic()

    async def run(self, interval: float | None = None) -> None:
        """Beat every ``interval`` seconds until cancelled: by default every second, or
        four times within ``stall_after`` when that is shorter, so that an idle loop
        never reads as stalled."""
        if interval is None:
            interval = min(HEARTBEAT_INTERVAL, self.stall_after / 4)
        while True:
            self.last = time.monotonic()
            await asyncio.sleep(interval)

    def stalled(self) -> str | None:
        """None while the loop beats, else how long it has been silent."""
        silent = time.monotonic() - self.last
        if silent > self.stall_after:
            return f"event loop unresponsive for {silent:.1f}s"
        return None


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    registry: CollectorRegistry
    live: Probe
    ready: Probe
    detail: Probe | None


class _IPv6Server(_Server):
    address_family = socket.AF_INET6


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if path == "/metrics":
            self._metrics()
        elif path == "/healthz":
            self._probe(self.server.live, "ok")
        elif path == "/readyz":
            self._probe(self.server.ready, "ready", self.server.detail)
        elif path == "/":
            self._send(200, _INDEX)
        else:
            self._send(404, b"not found: try /metrics, /healthz or /readyz\n")

    def _metrics(self) -> None:
        encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
        try:
            body = encoder(self.server.registry)
        except Exception:
            log.exception("could not collect metrics")
            self._send(500, b"could not collect metrics\n")
            return
        self._send(200, body, content_type)

    def _probe(self, probe: Probe, ok: str, detail: Probe | None = None) -> None:
        try:
            reason = probe()
        except Exception as exc:
            log.exception("probe failed")
            reason = f"probe failed: {type(exc).__name__}"
        if reason is None:  # ready, with what a ready worker should still say (detail)
            said = detail() if detail is not None else None
            self._send(200, f"{ok}{'; ' + said if said else ''}\n".encode())
        else:
            self._send(503, f"{reason}\n".encode())

    def _send(self, status: int, body: bytes, content_type: str = _TEXT) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        log.debug("%s %s", self.address_string(), format % args)


class EndpointServer:
    """``/metrics`` from ``registry``, ``/healthz`` from ``live``, ``/readyz`` from
    ``ready``, on ``bind``:``port`` (port 0 picks a free one), in a daemon thread."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        live: Probe,
        ready: Probe,
        port: int,
        bind: str = DEFAULT_BIND,
        detail: Probe | None = None,
    ) -> None:
        self.registry = registry
        self.live = live
        self.ready = ready
        self.detail = detail  # said after "ready" on a 200 from /readyz
        self.bind = bind
        self.port = port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Bind and serve; :class:`ConfigurationError` if the address cannot be had."""
        cls = _IPv6Server if ":" in self.bind else _Server
        try:
            server = cls((self.bind, self.port), _Handler)
        except OSError as exc:
            raise ConfigurationError(
                f"cannot serve metrics on {self.bind}:{self.port}: {exc.strerror or exc}"
            ) from exc
        server.registry, server.live, server.ready = self.registry, self.live, self.ready
        server.detail = self.detail
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, args=(0.2,), name="rabbitq-metrics", daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        """Where to scrape, e.g. ``http://localhost:9100/metrics``."""
        host = self.bind
        if host in ("0.0.0.0", "::", ""):
            host = "localhost"
        elif ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving and release the port. Idempotent."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None


def _uses(worker: AnyWorker, metrics: Metrics) -> bool:
    hooks = worker.hooks
    return hooks is metrics or metrics in getattr(hooks, "hooks", ())


@contextlib.asynccontextmanager
async def serve_metrics(
    worker: AnyWorker,
    metrics: Metrics,
    *,
    port: int,
    bind: str = DEFAULT_BIND,
    sample_interval: float = DEFAULT_SAMPLE_INTERVAL,
    stall_after: float = DEFAULT_STALL_AFTER,
) -> AsyncIterator[EndpointServer]:
    """Serve ``/metrics``, ``/healthz`` and ``/readyz`` for ``worker`` while the block runs,
    and sample its queues' depths every ``sample_interval`` seconds.

    ``metrics`` must be the worker's hooks (``Worker(app, hooks=metrics)``)::

        metrics = Metrics()
        worker = Worker(app, hooks=metrics)
        async with serve_metrics(worker, metrics, port=9100):
            await worker.run()
    """
    if not _uses(worker, metrics):
        raise ConfigurationError(
            "serve_metrics needs the worker to report to these metrics: Worker(app, hooks=metrics)"
        )
    metrics.expect(worker.app)
    heartbeat = Heartbeat(stall_after)
    server = EndpointServer(
        metrics.registry, live=heartbeat.stalled, ready=worker.health, port=port, bind=bind,
        detail=metrics.ready_detail,
    )  # fmt: skip
    server.start()
    log.info(
        "serving metrics on %s (and /healthz, /readyz; listening on %s:%d)",
        server.url,
        bind,
        server.port,
    )
    specs = worker.topology.depth_specs()
    tasks = [
        asyncio.create_task(heartbeat.run(), name="rabbitq-heartbeat"),
        asyncio.create_task(
            sample_queues(metrics, lambda: worker.connection, specs, interval=sample_interval),
            name="rabbitq-queue-sampler",
        ),
    ]
    try:
        yield server
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.to_thread(server.close)
