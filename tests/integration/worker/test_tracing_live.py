"""OpenTelemetry through a real worker, publisher and DLQ replay on the real broker.

A message that fails twice (attempt 1 is retried, attempt 2 dead-lettered as
``exhausted``), is replayed and then succeeds is one trace: the send span, three
``process`` spans that are its children (each with its ``ack`` settle span), a
``replay`` span, and the links from each attempt to the span that sent its copy; their
names and destinations follow the messaging conventions (semconv 1.44) as the broker
delivered each. Spans go to the SDK's in-memory exporter.
"""

from __future__ import annotations

import logging

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from rabbitq import Context, Message, RetryPolicy, Worker, dlq
from rabbitq.tracing import TraceIds
from rabbitq.tracing.otel import OpenTelemetry
from tests.helpers import Recorder, running, wait_for

pytestmark = [pytest.mark.broker]


class Charge(Message, type="test.tracing.charge"):
    amount: int


CHARGE = Charge.type_name()


class Charged(Message, type="test.tracing.charged"):
    amount: int


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []
        self.addFilter(TraceIds())

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


async def test_fail_twice_dead_letter_replay_succeed_is_one_trace(make_app, broker_url):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing = OpenTelemetry(tracer_provider=provider)
    app = make_app(retry=RetryPolicy(delays=(0.2,)), tracing=tracing)
    calls: list[int] = []
    log = logging.getLogger("test.tracing.handler")
    capture = _Capture()
    log.addHandler(capture)
    log.setLevel(logging.INFO)

    @app.handler(Charge)
    async def charge(msg: Charge, ctx: Context) -> None:
        calls.append(ctx.attempt)
        log.info("charging attempt %d", ctx.attempt)
        if len(calls) <= 2:
            raise OSError("gateway down")
        async with app.publisher() as pub:  # a follow-up, from inside the handler
            await pub.publish(Charged(amount=msg.amount))

    @app.handler(Charged)
    async def charged(msg: Charged) -> None:
        pass

    recorder = Recorder()
    try:
        async with running(Worker(app, hooks=recorder)):
            async with app.publisher() as pub:
                message_id = await pub.publish(Charge(amount=5), correlation_id="order-7")
            await wait_for(lambda: recorder.count("dead_lettered") == 1, timeout=30)
            tally = await dlq.replay(app.queue, url=broker_url, tracing=tracing)
            assert tally.done == 1
            await wait_for(lambda: recorder.count("succeeded") == 2, timeout=30)
    finally:
        log.removeHandler(capture)

    spans = list(exporter.get_finished_spans())
    assert len({s.context.trace_id for s in spans}) == 1, "one trace"
    by_name: dict[str, list] = {}
    for span in spans:
        by_name.setdefault(span.name, []).append(span)
    send = f"send {app.exchange}:{CHARGE}"
    (publish,) = [s for s in by_name[send] if s.parent is None]
    attempts = sorted(
        (
            s
            for s in spans
            if s.kind == SpanKind.CONSUMER and s.attributes["rabbitq.type"] == CHARGE
        ),
        key=lambda s: s.start_time,
    )
    (replay,) = by_name[f"replay {app.queue}"]
    assert len(attempts) == 3 and calls == [1, 2, 1]
    assert publish.kind == SpanKind.PRODUCER and replay.kind == SpanKind.PRODUCER
    assert publish.attributes["messaging.message.id"] == message_id
    assert publish.attributes["messaging.message.conversation_id"] == "order-7"
    assert publish.attributes["messaging.destination.name"] == f"{app.exchange}:{CHARGE}"
    assert publish.attributes["messaging.rabbitmq.destination.routing_key"] == CHARGE
    assert publish.attributes["messaging.operation.type"] == "send"
    for attempt in attempts:
        assert attempt.parent.span_id == publish.context.span_id
        assert attempt.attributes["messaging.system"] == "rabbitmq"
        assert attempt.attributes["messaging.operation.type"] == "process"
        assert attempt.attributes["messaging.message.id"] == message_id
    first, second, third = attempts
    # {exchange}:{routing key}:{queue} as the broker delivered each: published to the
    # app's exchange with the type as key; the retry dead-lettered back, and the replay
    # sent, through the default exchange with the queue's name as key (so: the queue).
    destinations = [a.attributes["messaging.destination.name"] for a in attempts]
    assert destinations == [f"{app.exchange}:{CHARGE}:{app.queue}", app.queue, app.queue]
    assert [a.name for a in attempts] == [f"process {d}" for d in destinations]
    # each attempt settled by an ack (its outcome safe: the retry and DLQ copies
    # confirmed first), a child of its process span
    settles = {s.parent.span_id: s for s in spans if s.kind == SpanKind.CLIENT}
    for attempt, destination in zip(attempts, destinations, strict=True):
        settle = settles[attempt.context.span_id]
        assert settle.name == f"ack {destination}"
        assert settle.attributes["messaging.operation.type"] == "settle"
        assert settle.attributes["messaging.destination.name"] == destination
        tag = attempt.attributes["messaging.rabbitmq.message.delivery_tag"]
        assert isinstance(tag, int) and tag >= 1
        assert settle.attributes["messaging.rabbitmq.message.delivery_tag"] == tag
    assert [link.context.span_id for link in first.links] == []
    assert [link.context.span_id for link in second.links] == [first.context.span_id]
    assert [link.context.span_id for link in replay.links] == [second.context.span_id]
    assert [link.context.span_id for link in third.links] == [replay.context.span_id]
    assert [e.name for e in first.events] == ["rabbitq.retry"]
    assert first.events[0].attributes["rabbitq.retry.delay"] == "200ms"
    assert first.status.status_code == StatusCode.ERROR
    assert second.attributes["rabbitq.dead_letter.reason"] == "exhausted"
    assert [e.name for e in second.events] == ["rabbitq.dead_letter"]
    assert third.attributes["rabbitq.outcome"] == "success"
    # The follow-up is published from the third attempt, and handled in the same trace.
    follow = [s for s in by_name[f"send {app.exchange}:{Charged.type_name()}"]]
    assert [s.parent.span_id for s in follow] == [third.context.span_id]
    # The handler's log lines carry the ids of the attempt they were written in.
    assert [(r.trace_id, r.span_id) for r in capture.records] == [
        (f"{a.context.trace_id:032x}", f"{a.context.span_id:016x}") for a in attempts
    ]


APP_MODULE = """\
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rabbitq import App
from rabbitq.tracing.otel import OpenTelemetry

EXPORTER = InMemorySpanExporter()
_provider = TracerProvider()
_provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
app = App(queue={queue!r}, exchange={exchange!r}, tracing=OpenTelemetry(tracer_provider=_provider))
"""


async def test_the_replay_command_traces_with_the_apps_tracing(
    make_app, connection, broker_url, tmp_path, monkeypatch
):
    import asyncio
    import importlib
    import sys

    import aio_pika
    from click.testing import CliRunner

    from rabbitq.cli import main
    from rabbitq.tracing.base import PREVIOUS_SPAN, TRACEPARENT
    from tests.helpers import declare_topology, drain_queue

    app = make_app()
    await declare_topology(connection, app)
    name = f"traced_app_{app.queue.replace('.', '_')}"
    (tmp_path / f"{name}.py").write_text(APP_MODULE.format(queue=app.queue, exchange=app.exchange))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    trace_id, failed_span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    channel = await connection.channel()
    await channel.default_exchange.publish(
        aio_pika.Message(
            b"{}",
            message_id="m-1",
            headers={
                TRACEPARENT: f"00-{trace_id}-a3ce929d0e0e4736-01",
                PREVIOUS_SPAN: f"00-{trace_id}-{failed_span}-01",
                "rabbitq-queue": app.queue,
                "rabbitq-reason": "exhausted",
            },
        ),
        routing_key=app.topology().dlq.name,
    )
    await channel.close()
    result = await asyncio.to_thread(
        CliRunner().invoke,
        main,
        ["dlq", "replay", app.queue, "--app", f"{name}:app", "--url", broker_url],
    )
    assert result.exit_code == 0, result.output
    (back,) = await drain_queue(connection, app.queue)
    module = importlib.import_module(name)
    (span,) = module.EXPORTER.get_finished_spans()
    sys.modules.pop(name, None)
    assert span.name == f"replay {app.queue}"
    assert f"{span.context.trace_id:032x}" == trace_id  # in the message's own trace
    assert [f"{link.context.span_id:016x}" for link in span.links] == [failed_span]
    assert back.headers[TRACEPARENT] == f"00-{trace_id}-a3ce929d0e0e4736-01"  # kept
    assert back.headers[PREVIOUS_SPAN] == f"00-{trace_id}-{span.context.span_id:016x}-01"
