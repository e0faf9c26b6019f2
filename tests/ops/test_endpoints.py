"""The HTTP endpoints, served on loopback from given probes (no broker needed)."""

from __future__ import annotations

import asyncio
import time

import pytest
from prometheus_client import CollectorRegistry, Counter

from rabbitq import App, Message, Metrics, Worker, serve_metrics
from rabbitq._ops.endpoints import EndpointServer, Heartbeat
from rabbitq._ops.status import state_code, state_reason
from rabbitq._ops.supervisor import restart_delay
from rabbitq.errors import ConfigurationError
from tests.scrape import http_get, parse


class Ping(Message, type="test.endpoints.ping"):
    n: int


def serve(live=lambda: None, ready=lambda: None) -> tuple[EndpointServer, str, CollectorRegistry]:
    registry = CollectorRegistry()
    Counter("rabbitq_test_total", "a test counter", registry=registry).inc(3)
    server = EndpointServer(registry, live=live, ready=ready, port=0, bind="127.0.0.1")
    server.start()
    return server, f"http://127.0.0.1:{server.port}", registry


def test_metrics_healthz_and_readyz_answer_from_the_registry_and_probes():
    reasons = {"live": None, "ready": "not connected to RabbitMQ"}
    server, base, _ = serve(lambda: reasons["live"], lambda: reasons["ready"])
    try:
        status, body = http_get(f"{base}/metrics")
        assert status == 200
        assert parse(body)[("rabbitq_test_total", ())] == 3
        assert http_get(f"{base}/healthz") == (200, "ok\n")
        assert http_get(f"{base}/readyz") == (503, "not connected to RabbitMQ\n")
        reasons["ready"] = None
        assert http_get(f"{base}/readyz") == (200, "ready\n")
        reasons["live"] = "event loop unresponsive for 12.0s"
        assert http_get(f"{base}/healthz") == (503, "event loop unresponsive for 12.0s\n")
        assert http_get(f"{base}/nope")[0] == 404
        assert server.url == f"http://127.0.0.1:{server.port}/metrics"
    finally:
        server.close()


def test_a_ready_worker_says_what_it_should_still_say_and_stays_200():
    detail = {"said": "emails.dlq drops messages: message-ttl 2000 (policy 'p'): ..."}
    server = EndpointServer(CollectorRegistry(), live=lambda: None, ready=lambda: None,
                            detail=lambda: detail["said"], port=0, bind="127.0.0.1")  # fmt: skip
    server.start()
    try:
        readyz = f"http://127.0.0.1:{server.port}/readyz"
        assert http_get(readyz) == (200, f"ready; {detail['said']}\n")
        detail["said"] = None
        assert http_get(readyz) == (200, "ready\n")
    finally:
        server.close()


def test_a_probe_that_raises_is_a_503_naming_the_error_not_a_crash():
    def broken() -> str | None:
        raise KeyError("x")

    server, base, _ = serve(ready=broken)
    try:
        assert http_get(f"{base}/readyz") == (503, "probe failed: KeyError\n")
        assert http_get(f"{base}/healthz")[0] == 200  # the server goes on
    finally:
        server.close()


def test_a_port_in_use_is_a_one_line_configuration_error():
    server, _, registry = serve()
    try:
        other = EndpointServer(
            registry, live=lambda: None, ready=lambda: None, port=server.port, bind="127.0.0.1"
        )
        with pytest.raises(
            ConfigurationError, match=f"cannot serve metrics on 127.0.0.1:{server.port}"
        ):
            other.start()
    finally:
        server.close()


def test_the_heartbeat_goes_stale_when_the_loop_stops_beating():
    beat = Heartbeat(stall_after=0.05)
    assert beat.stalled() is None
    beat.last = time.monotonic() - 1
    assert (beat.stalled() or "").startswith("event loop unresponsive for 1.")


async def test_an_idle_loop_beats_often_enough_for_a_short_stall_limit():
    # stall_after=0.2 must beat about every 0.05 s: several distinct beats in 0.6 s,
    # where a one-second beat would show one (and /healthz would read an idle loop as stalled)
    beat = Heartbeat(stall_after=0.2)
    task = asyncio.create_task(beat.run())
    beats = set()
    try:
        for _ in range(12):
            await asyncio.sleep(0.05)
            beats.add(beat.last)
    finally:
        task.cancel()
    assert len(beats) >= 4


async def test_serve_metrics_needs_the_worker_to_report_to_the_same_metrics():
    app = App(queue="unused")

    @app.handler(Ping)
    async def ping(msg: Ping) -> None: ...

    worker = Worker(app, hooks=Metrics())
    with pytest.raises(ConfigurationError, match="hooks=metrics"):
        async with serve_metrics(worker, Metrics(), port=0):
            pass


def test_worker_states_survive_the_trip_through_shared_memory():
    from rabbitq._worker.consumer import NOT_CONNECTED, NOT_CONSUMING, STARTING

    for reason in (None, STARTING, NOT_CONNECTED, NOT_CONSUMING):
        assert state_reason(state_code(reason)) == reason
    assert state_reason(state_code("something new")) == "not ready"


def test_restarts_back_off_from_one_second_to_thirty():
    assert [restart_delay(n) for n in (1, 2, 3, 4, 5, 6, 7)] == [1, 2, 4, 8, 16, 30, 30]
