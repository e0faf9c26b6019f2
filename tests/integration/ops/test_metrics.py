"""A worker's /metrics, /healthz and /readyz against the real broker: exact counts for a
known mix of outcomes, readiness through a lost connection, liveness of the event loop."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time

import aio_pika
import pytest

import rabbitq
from rabbitq import Context, Message, Metrics, PermanentError, RetryPolicy, Unroutable, Worker
from rabbitq import serve_metrics as serve_metrics_
from rabbitq._worker.consumer import NOT_CONNECTED
from tests.helpers import running, wait_for
from tests.integration.worker.test_reconnect import close_connections_named
from tests.proxy import TcpProxy
from tests.scrape import http_get, logged_port, scrape, total, value

pytestmark = pytest.mark.broker


class Job(Message, type="test.metrics.job"):
    n: int
    fail: int = 0  # fail this many attempts first
    permanent: bool = False
    block: float = 0.0  # block the event loop this long (a misbehaving handler)


class Stray(Message, type="test.metrics.stray"):
    """A type nothing is bound to: publishing it is unroutable."""


def serve_metrics(worker: Worker, metrics: Metrics, **kwargs):
    kwargs.setdefault("sample_interval", 0.2)
    return serve_metrics_(worker, metrics, port=0, bind="127.0.0.1", **kwargs)


async def get(url: str) -> tuple[int, str]:
    return await asyncio.to_thread(http_get, url)


async def answers(url: str, status: int) -> bool:
    return (await get(url))[0] == status


def make_job_app(make_app, **kwargs):
    app = make_app(retry=RetryPolicy(delays=(0.1, 0.2)), prefetch=8, **kwargs)

    @app.handler(Job)
    async def job(msg: Job, ctx: Context) -> None:
        if msg.block:
            time.sleep(msg.block)  # a blocking call on the loop: the point of the test
        if msg.permanent:
            raise PermanentError(f"card declined for message {ctx.message_id}")
        if ctx.attempt <= msg.fail:
            raise RuntimeError(f"flaky provider, message {ctx.message_id}")

    return app


async def test_metrics_count_a_known_mix_exactly_by_outcome_tier_and_reason(make_app, connection):
    app = make_job_app(make_app)
    metrics = Metrics()
    worker = Worker(app, hooks=metrics)
    q, t, x = app.queue, Job.type_name(), app.exchange
    async with serve_metrics(worker, metrics) as server, running(worker):
        base = f"http://127.0.0.1:{server.port}"
        async with app.publisher(hooks=metrics) as pub:
            ids = await pub.publish_many(
                [
                    *(Job(n=i) for i in range(3)),  # success
                    Job(n=3, fail=1),  # 100ms, then success
                    Job(n=4, fail=2),  # 100ms, 200ms, then success
                    Job(n=5, fail=99),  # 100ms, 200ms, then exhausted
                    Job(n=6, permanent=True),  # permanent
                ]
            )
            with pytest.raises(Unroutable):
                await pub.publish(Stray())
        channel = await connection.channel()
        exchange = await channel.get_exchange(x)
        # invalid: a known type whose body is not JSON
        await exchange.publish(aio_pika.Message(b"{not json", type=t, message_id="bad-1"), t)
        # unknown-type: straight to the queue, with a type no handler knows
        await channel.default_exchange.publish(
            aio_pika.Message(b"{}", type="test.metrics.nobody", message_id="odd-1"), q
        )
        await channel.close()

        async def settled() -> bool:
            s = await asyncio.to_thread(scrape, base)
            return total(s, "rabbitq_messages_processed_total") == 14 and (
                value(s, "rabbitq_queue_messages", queue=f"{q}.dlq", kind="dlq") == 4
            )

        await wait_for(settled, timeout=30, interval=0.2)
        status, body = await get(f"{base}/metrics")
        assert status == 200
        s = await asyncio.to_thread(scrape, base)

    def counter(name: str, **labels: str) -> float | None:
        return value(s, name, queue=q, **labels)

    assert counter("rabbitq_messages_received_total", type=t) == 13
    assert counter("rabbitq_messages_received_total", type="unknown") == 1
    assert counter("rabbitq_messages_processed_total", type=t, outcome="success") == 5
    assert counter("rabbitq_messages_processed_total", type=t, outcome="retried") == 5
    assert counter("rabbitq_messages_processed_total", type=t, outcome="dead_lettered") == 3
    assert counter("rabbitq_messages_processed_total", type="unknown", outcome="dead_lettered") == 1
    assert counter("rabbitq_retries_total", type=t, delay="100ms") == 3
    assert counter("rabbitq_retries_total", type=t, delay="200ms") == 2
    for reason in ("exhausted", "permanent", "invalid"):
        assert counter("rabbitq_dead_letters_total", type=t, reason=reason) == 1
    assert counter("rabbitq_dead_letters_total", type="unknown", reason="unknown-type") == 1
    assert counter("rabbitq_messages_requeued_total", type=t) == 0
    # the handler ran 12 times: 5 successes, 5 failed attempts retried, exhausted, permanent
    assert counter("rabbitq_handler_duration_seconds_count", type=t) == 12
    assert counter("rabbitq_handler_duration_seconds_bucket", type=t, le="+Inf") == 12
    assert counter("rabbitq_messages_in_flight") == 0
    assert counter("rabbitq_prefetch") == 8
    assert counter("rabbitq_consuming") == 1
    assert counter("rabbitq_circuit_open") == 0
    assert value(s, "rabbitq_published_total", exchange=x, type=t) == 7
    assert (
        value(
            s,
            "rabbitq_publish_errors_total",
            exchange=x,
            type=Stray.type_name(),
            error="unroutable",
        )
        == 1
    )
    assert value(s, "rabbitq_queue_messages", queue=q, kind="main") == 0
    assert value(s, "rabbitq_queue_messages", queue=f"{q}.retry.100ms", kind="retry") == 0
    assert value(s, "rabbitq_queue_messages", queue=f"{q}.retry.200ms", kind="retry") == 0
    assert value(s, "rabbitq_queue_consumers", queue=q) == 1
    assert value(s, "rabbitq_connection_up") == 1
    assert value(s, "rabbitq_reconnects_total") == 0
    assert value(s, "rabbitq_info", version=rabbitq.__version__) == 1

    # Labels are bounded: names from the app and fixed vocabularies, never ids or errors.
    allowed = {
        q, f"{q}.retry.100ms", f"{q}.retry.200ms", f"{q}.dlq", x,
        t, Stray.type_name(), "unknown",
        "success", "retried", "dead_lettered",
        "exhausted", "permanent", "invalid", "unknown-type",
        "unroutable", "nacked", "interrupted",
        "consumer_cancelled",  # a re-declare's reason (the other is "unroutable")
        "100ms", "200ms", "main", "retry", "dlq", rabbitq.__version__,
    }  # fmt: skip
    for (name, labels), _ in s.items():
        for label, label_value in labels:
            if label != "le":
                assert label_value in allowed, (name, label, label_value)
    for text in [*ids, "bad-1", "odd-1", "flaky", "declined", "nobody"]:
        assert text not in body


async def test_readyz_is_503_while_the_connection_is_lost_and_200_after_the_reconnect(
    make_app, broker_url
):
    app = make_job_app(make_app)
    metrics = Metrics()
    # Through a proxy that can refuse reconnects: aio-pika's first reconnect is immediate,
    # and the test must see the worker while it is disconnected.
    proxy = await TcpProxy(broker_url).start()
    worker = Worker(app, url=proxy.url, hooks=metrics)
    try:
        async with serve_metrics(worker, metrics) as server:
            base = f"http://127.0.0.1:{server.port}"
            assert (await get(f"{base}/readyz"))[0] == 503  # not started yet
            async with running(worker):
                assert await get(f"{base}/readyz") == (200, "ready\n")
                assert await get(f"{base}/healthz") == (200, "ok\n")
                proxy.refuse()
                name = f"rabbitq worker {app.queue}"
                assert await asyncio.to_thread(close_connections_named, name) == 1
                await wait_for(lambda: answers(f"{base}/readyz", 503), timeout=10)
                assert await get(f"{base}/readyz") == (503, f"{NOT_CONNECTED}\n")
                assert await get(f"{base}/healthz") == (200, "ok\n")  # alive, not ready
                s = await asyncio.to_thread(scrape, base)
                assert value(s, "rabbitq_connection_up") == 0
                assert value(s, "rabbitq_consuming", queue=app.queue) == 1  # will resume
                await proxy.start()
                await wait_for(lambda: answers(f"{base}/readyz", 200), timeout=30)
                s = await asyncio.to_thread(scrape, base)
                assert value(s, "rabbitq_reconnects_total") == 1
                assert value(s, "rabbitq_connection_up") == 1
                # and it consumes again
                async with app.publisher() as pub:
                    await pub.publish(Job(n=1))
                await wait_for(
                    lambda: (
                        metrics.registry.get_sample_value(
                            "rabbitq_messages_processed_total",
                            {"queue": app.queue, "type": Job.type_name(), "outcome": "success"},
                        )
                        == 1
                    )
                )
            # drained: no longer ready
            assert (await get(f"{base}/readyz"))[0] == 503
    finally:
        await proxy.close()


async def test_healthz_fails_while_a_handler_stalls_the_event_loop(make_app):
    app = make_job_app(make_app)
    metrics = Metrics()
    worker = Worker(app, hooks=metrics)
    seen: list[tuple[int, str]] = []
    stop = threading.Event()

    def poll(base: str) -> None:
        while not stop.is_set():
            seen.append(http_get(f"{base}/healthz"))
            time.sleep(0.05)

    async with serve_metrics(worker, metrics, stall_after=1.0) as server, running(worker):
        poller = threading.Thread(target=poll, args=(f"http://127.0.0.1:{server.port}",))
        poller.start()
        try:
            # healthy before the stall: wait for the first answer before blocking the loop
            # (publishing at once could stall it before the poller's first request lands)
            await wait_for(lambda: len(seen) >= 10)  # half a second, several beats
            assert set(seen) == {(200, "ok\n")}
            async with app.publisher() as pub:
                await pub.publish(Job(n=1, block=3.0))
            await wait_for(
                lambda: (
                    metrics.registry.get_sample_value(
                        "rabbitq_messages_processed_total",
                        {"queue": app.queue, "type": Job.type_name(), "outcome": "success"},
                    )
                    == 1
                )
            )
            await wait_for(lambda: seen and seen[-1] == (200, "ok\n"))
        finally:
            stop.set()
            await asyncio.to_thread(poller.join)
    stalled = [body for status, body in seen if status == 503]
    assert stalled and all(b.startswith("event loop unresponsive for ") for b in stalled)


CLI_APP = """\
from rabbitq import App, Message


class Job(Message, type="test.metrics.job"):
    n: int


app = App(queue={queue!r}, exchange={exchange!r}, prefetch=5)


@app.handler(Job)
async def job(msg: Job) -> None:
    pass
"""


async def test_rabbitq_worker_metrics_port_serves_and_says_where(make_app, broker_url, tmp_path):
    app = make_app()
    (tmp_path / "cli_metrics_app.py").write_text(
        CLI_APP.format(queue=app.queue, exchange=app.exchange)
    )
    log_path = tmp_path / "worker.log"
    command = [
        *(sys.executable, "-m", "rabbitq", "worker", "cli_metrics_app:app"),
        # port 0: the worker binds a free port and says which (none is picked before)
        *("--metrics-port", "0", "--metrics-bind", "127.0.0.1"),
    ]
    env = {**os.environ, "RABBITQ_URL": broker_url}
    with log_path.open("w") as log:
        proc = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=log, stderr=log)
    try:
        up = [(proc, log_path)]  # if the worker dies, its last lines say why
        await wait_for(
            lambda: logged_port(log_path.read_text()), timeout=30, interval=0.1, running=up
        )
        port = logged_port(log_path.read_text())
        assert port, log_path.read_text()
        base = f"http://127.0.0.1:{port}"

        async def ready() -> bool:
            try:
                return (await get(f"{base}/readyz"))[0] == 200
            except OSError:
                return False

        await wait_for(ready, timeout=30, interval=0.1, running=up)
        s = await asyncio.to_thread(scrape, base)
        assert value(s, "rabbitq_prefetch", queue=app.queue) == 5
        assert value(s, "rabbitq_info", version=rabbitq.__version__) == 1
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert f"serving metrics on {base}/metrics" in log_path.read_text()


class Hang(Message, type="test.metrics.hang"):
    n: int


async def test_the_abandoned_threads_gauge_counts_a_hung_sync_handler_until_it_returns(make_app):
    app = make_app(retry=RetryPolicy(delays=(0.1,)), prefetch=2)
    release = threading.Event()
    calls: list[int] = []

    @app.handler(Hang, timeout=0.2)
    def hang(msg: Hang) -> None:
        calls.append(msg.n)
        if len(calls) == 1:
            release.wait(30)  # the first attempt hangs past its timeout; the retry does not

    metrics = Metrics()
    metrics.expect(app)
    worker = Worker(app, hooks=metrics)

    def abandoned() -> float | None:
        return metrics.registry.get_sample_value(
            "rabbitq_handler_threads_abandoned", {"queue": app.queue}
        )

    try:
        async with running(worker), app.publisher() as pub:
            assert abandoned() == 0
            await pub.publish(Hang(n=1))
            await wait_for(lambda: calls == [1, 1], timeout=10)  # retried, and handled
            assert abandoned() == 1  # the first attempt's thread is still held
            release.set()
            await wait_for(lambda: abandoned() == 0, timeout=10)
    finally:
        release.set()
