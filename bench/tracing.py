"""tracing: what OpenTelemetry tracing costs per message, off against on.

Three measures, each as rabbitq's CPU time per message (steadier than rates on a
shared machine) and messages per second, over interleaved rounds (off, on, on, off, ...):

- ``hooks``: the tracing calls alone, without a broker: one publish span with header
  injection, one delivery span with extraction, activation and end;
- ``publish``: ``Publisher.publish_many`` of N typed messages;
- ``consume``: a Worker with a no-op handler on N pre-published messages that carry a
  ``traceparent`` (so that the traced side has a parent to extract).

"On" is ``App(tracing=OpenTelemetry(...))`` on the SDK's TracerProvider with a
BatchSpanProcessor and an exporter that drops the spans (what a process with an OTLP
exporter does on its own thread, minus the network). Run it with::

    python -m bench.tracing [--n 5000] [--rounds 3] [--url amqp://...]

and see docs/benchmarks.md for the figures on this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

import rabbitq._ops.loop
from rabbitq import App, RetryPolicy, Worker
from rabbitq.tracing import Tracing
from rabbitq.tracing.base import NO_TRACING
from rabbitq.tracing.otel import OpenTelemetry

from .common import (
    DEFAULT_URL,
    BenchJob,
    SettleClock,
    build,
    check_local,
    clock,
    job,
    rate,
    topology,
    unique,
)

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


class _Drop(SpanExporter):
    """Counts the spans and drops them."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def _tracing(on: bool) -> tuple[Tracing, TracerProvider | None]:
    if not on:
        return NO_TRACING, None
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(_Drop(), max_queue_size=65536))
    return OpenTelemetry(tracer_provider=provider), provider


def _app(tracing: Tracing, prefetch: int = 256) -> App:
    queue = unique("tracing")
    return App(
        queue=queue,
        exchange=queue + ".x",
        prefetch=prefetch,
        retry=RetryPolicy(delays=(60,)),
        tracing=tracing,
    )


def hooks(n: int, on: bool) -> dict[str, float]:
    """The tracing calls of one publish and one delivery, without any I/O."""
    tracing, provider = _tracing(on)
    started, cpu = clock(), time.process_time()
    for i in range(n):
        headers: dict[str, Any] = {}
        tracing.publish(
            headers,
            exchange="x",
            routing_key="bench.job",
            type_name="bench.job",
            message_id=str(i),
            correlation_id=None,
            body_size=200,
        ).end()
        span = tracing.deliver(
            headers,
            queue="q",
            type_name="bench.job",
            routing_key="bench.job",
            message_id=str(i),
            correlation_id=None,
            attempt=1,
            body_size=200,
        )
        with span.activate():
            pass
        span.end("success")
    result = _figures(n, started, clock(), cpu)
    if provider is not None:
        provider.shutdown()
    return result


async def publish(url: str, n: int, on: bool) -> dict[str, float]:
    tracing, provider = _tracing(on)
    app = _app(tracing)

    @app.handler(BenchJob)
    async def handle(msg: BenchJob) -> None:
        pass

    messages = [job(i) for i in range(n)]
    async with topology(url, app), app.publisher(url=url) as pub:
        started, cpu = clock(), time.process_time()
        await pub.publish_many(messages)
        result = _figures(n, started, clock(), cpu)
    if provider is not None:
        provider.shutdown()
    return result


async def consume(url: str, n: int, on: bool) -> dict[str, float]:
    tracing, provider = _tracing(on)
    app = _app(tracing)

    @app.handler(BenchJob)
    async def handle(msg: BenchJob) -> None:
        pass

    async with topology(url, app) as conn:
        await _prefill(conn, app.queue, n)
        clock_hooks = SettleClock(n)
        worker = Worker(app, url=url, hooks=clock_hooks)
        task = asyncio.create_task(worker.run())
        try:
            await asyncio.wait_for(clock_hooks.done.wait(), 300)
        finally:
            worker.stop()
            await task
    if provider is not None:
        provider.shutdown()
    return {
        "msg/s": rate(n, clock_hooks.first, clock_hooks.last),
        "cpu us/msg": (clock_hooks.cpu[1] - clock_hooks.cpu[0]) / n * 1e6,
    }


def _traced(message: BenchJob) -> Any:
    out = build(message)
    out.headers = {"traceparent": TRACEPARENT}
    return out


async def _prefill(conn: Any, queue: str, n: int) -> None:
    """``n`` jobs straight into ``queue``, each with a ``traceparent``. Not measured."""
    channel = await conn.channel(publisher_confirms=True)
    for start in range(0, n, 1000):
        await asyncio.gather(
            *(
                channel.default_exchange.publish(_traced(job(i)), routing_key=queue)
                for i in range(start, min(n, start + 1000))
            )
        )
    await channel.close()


def _figures(n: int, started: float, ended: float, cpu: float) -> dict[str, float]:
    return {"msg/s": rate(n, started, ended), "cpu us/msg": (time.process_time() - cpu) / n * 1e6}


async def main(url: str, n: int, rounds: int) -> None:
    results: dict[tuple[str, bool], list[dict[str, float]]] = {}
    for r in range(rounds):
        order = (False, True) if r % 2 == 0 else (True, False)
        for on in order:
            results.setdefault(("hooks", on), []).append(hooks(n, on))
            results.setdefault(("publish", on), []).append(await publish(url, n, on))
            results.setdefault(("consume", on), []).append(await consume(url, n, on))
    print(f"n={n}, rounds={rounds}; medians (min-max) over the rounds")
    print("| scenario | tracing | msg/s | cpu µs/msg | added cpu µs/msg |")
    print("|---|---|---|---|---|")
    for scenario in ("hooks", "publish", "consume"):
        off_cpu = statistics.median(x["cpu us/msg"] for x in results[(scenario, False)])
        for on in (False, True):
            runs = results[(scenario, on)]
            rates = [x["msg/s"] for x in runs]
            cpus = [x["cpu us/msg"] for x in runs]
            cpu = statistics.median(cpus)
            added = f"+{cpu - off_cpu:.1f}" if on else ""
            print(
                f"| {scenario} | {'on' if on else 'off'} | {statistics.median(rates):,.0f} "
                f"({min(rates):,.0f}-{max(rates):,.0f}) | {cpu:.1f} "
                f"({min(cpus):.1f}-{max(cpus):.1f}) | {added} |"
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=DEFAULT_URL)
    parser.add_argument("--n", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rabbitq._ops.loop.run(main(check_local(args.url), args.n, args.rounds))  # uvloop, as the worker
