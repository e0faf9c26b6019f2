"""The status recorder: the tracing calls of a delivery, a publish, a replay and a purge
become records, and every call still reaches the app's own tracing."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from rabbitq import App
from rabbitq.status.model import Record
from rabbitq.status.recorder import StatusTracing
from rabbitq.tracing.base import DeliverySpan, SendSpan, Tracing


class Writer:
    def __init__(self) -> None:
        self.records: list[Record] = []

    def add(self, record: Record) -> None:
        self.records.append(record)

    async def flush(self) -> None:
        self.records.append(Record("-", "flushed", 0.0))


class Inner(Tracing):
    """A tracing that notes every call it gets."""

    enabled = True

    def __init__(self) -> None:
        self.calls: list[str] = []

    def publish(self, headers: dict[str, Any], **kw: Any) -> SendSpan:
        self.calls.append("publish")
        headers["traceparent"] = "00-x"
        return self._send("publish")

    def replay(self, headers: dict[str, Any], **kw: Any) -> SendSpan:
        self.calls.append("replay")
        return self._send("replay")

    def _send(self, what: str) -> SendSpan:
        calls = self.calls

        class Span(SendSpan):
            def end(self, error: BaseException | None = None) -> None:
                calls.append(f"{what}.end:{error is None}")

        return Span()

    def deliver(self, headers: Any, **kw: Any) -> DeliverySpan:
        calls = self.calls
        calls.append("deliver")

        class Span(DeliverySpan):
            @contextlib.contextmanager
            def activate(self) -> Iterator[None]:
                calls.append("activate")
                yield
                calls.append("deactivate")

            def retried(self, *args: Any) -> None:
                calls.append("retried")

            def dead_lettered(self, *args: Any) -> None:
                calls.append("dead_lettered")

            def duplicate(self) -> None:
                calls.append("duplicate")

            def copied(self, headers: dict[str, Any]) -> None:
                calls.append("copied")

            def end(self, outcome: str, error: str | None = None) -> None:
                calls.append(f"end:{outcome}")

        return Span()

    def purged(self, *, queue: str, message_id: str) -> None:
        self.calls.append("purged")

    async def flush(self) -> None:
        self.calls.append("flush")


def _deliver(tracing: Tracing, attempt: int = 1) -> DeliverySpan:
    return tracing.deliver(
        {}, queue="q", type_name="t", routing_key="t", message_id="m1",
        correlation_id=None, attempt=attempt, body_size=3,
    )  # fmt: skip


def _recorder(inner: Tracing | None = None) -> tuple[StatusTracing, Writer]:
    writer = Writer()
    return StatusTracing(writer, inner or Inner()), writer  # type: ignore[arg-type]


def test_a_delivery_that_succeeds_is_received_started_succeeded_with_its_duration():
    inner = Inner()
    tracing, writer = _recorder(inner)
    span = _deliver(tracing)
    with span.activate():
        pass
    span.end("success")
    assert [(r.state, r.attempt) for r in writer.records] == [
        ("received", 1), ("started", 1), ("succeeded", 1),
    ]  # fmt: skip
    assert writer.records[0].detail == {"queue": "q", "type": "t"}
    assert writer.records[2].detail["duration"] >= 0
    assert inner.calls == ["deliver", "activate", "deactivate", "end:success"]


def test_a_retry_records_its_delay_next_attempt_and_time_and_the_error():
    tracing, writer = _recorder()
    span = _deliver(tracing, attempt=2)
    with span.activate():
        pass
    span.retried("10s", 3, False, "OSError: down")
    span.end("retried", "OSError: down")
    last = writer.records[-1]
    assert last.state == "retrying" and last.attempt == 2
    assert last.detail["delay"] == "10s" and last.detail["next_attempt"] == 3
    assert last.detail["error"] == "OSError: down"
    assert abs(last.detail["next_at"] - (last.at + 10)) < 0.01


def test_dead_letter_duplicate_and_requeue_are_their_own_states():
    tracing, writer = _recorder()
    span = _deliver(tracing)
    span.dead_lettered("permanent", "PermanentError: no")
    span.end("dead_lettered", "PermanentError: no")
    dup = _deliver(tracing)
    dup.duplicate()
    dup.end("success")
    back = _deliver(tracing)
    back.end("requeued")
    states = [r.state for r in writer.records if r.state != "received"]
    assert states == ["dead_lettered", "duplicate", "requeued"]
    assert writer.records[1].detail == {"reason": "permanent", "error": "PermanentError: no"}


def test_publish_and_replay_are_recorded_only_when_confirmed_at_the_time_they_were_sent():
    inner = Inner()
    tracing, writer = _recorder(inner)
    headers: dict[str, Any] = {}
    sent = tracing.publish(
        headers, exchange="x", routing_key="t", type_name="t", message_id="m1",
        correlation_id=None, body_size=3,
    )  # fmt: skip
    failed = tracing.publish(
        {}, exchange="x", routing_key="t", type_name="t", message_id="m2",
        correlation_id=None, body_size=3,
    )  # fmt: skip
    sent.end()
    failed.end(ConnectionError("lost"))
    replay = tracing.replay({}, queue="q", message_id="m1", correlation_id=None)
    replay.end()
    assert [(r.message_id, r.state) for r in writer.records] == [
        ("m1", "published"), ("m1", "replayed"),
    ]  # fmt: skip
    assert headers == {"traceparent": "00-x"}  # the app's own tracing still wrote its header
    assert inner.calls == [
        "publish", "publish", "publish.end:True", "publish.end:False", "replay", "replay.end:True",
    ]  # fmt: skip


async def test_purge_and_flush_reach_both():
    inner = Inner()
    tracing, writer = _recorder(inner)
    tracing.purged(queue="q.dlq", message_id="m1")
    await tracing.flush()
    assert [r.state for r in writer.records] == ["purged", "flushed"]
    assert inner.calls == ["purged", "flush"]


def test_an_app_with_a_status_store_wraps_its_tracing():
    from rabbitq.status import RedisStatus

    inner = Inner()
    app = App(queue="q", tracing=inner, status=RedisStatus())
    assert isinstance(app.tracing, StatusTracing) and app.tracing.inner is inner
    assert App(queue="q", tracing=inner).tracing is inner


def test_a_status_that_is_no_store_is_a_one_line_error():
    import pytest

    from rabbitq.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="status must be a PostgresStore, RedisStore"):
        App(queue="q", status="redis://localhost")  # type: ignore[arg-type]


async def test_app_status_without_a_store_says_so():
    import pytest

    from rabbitq.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match=r"has no status store: App\(status=\.\.\.\)"):
        await App(queue="q").status("m1")


def test_every_record_of_a_member_or_a_callback_carries_its_group():
    tracing, writer = _recorder()
    member = {"rabbitq-group": b"g1"}  # a long string that came off the wire as bytes
    sent = tracing.publish(
        dict(member), exchange="x", routing_key="t", type_name="t", message_id="m1",
        correlation_id=None, body_size=3,
    )  # fmt: skip
    sent.end()
    span = tracing.deliver(
        member, queue="q", type_name="t", routing_key="t", message_id="m1",
        correlation_id=None, attempt=1, body_size=3,
    )  # fmt: skip
    with span.activate():
        pass
    span.dead_lettered("permanent", "no")
    span.end("dead_lettered")
    tracing.replay({"rabbitq-group": "g1"}, queue="q", message_id="m1", correlation_id=None).end()
    callback = tracing.deliver(
        {"rabbitq-callback-of": "g1"}, queue="q", type_name="t", routing_key="t",
        message_id="cb", correlation_id=None, attempt=1, body_size=3,
    )  # fmt: skip
    callback.end("success")
    plain = tracing.deliver(
        {"rabbitq-group": "x" * 256}, queue="q", type_name="t", routing_key="t",
        message_id="p", correlation_id=None, attempt=1, body_size=3,
    )  # fmt: skip
    plain.end("success")
    by_id = {
        mid: {(r.state, r.group_id, r.callback_of) for r in writer.records if r.message_id == mid}
        for mid in ("m1", "cb", "p")
    }
    assert by_id["m1"] == {
        (s, "g1", None) for s in ("published", "received", "started", "dead_lettered", "replayed")
    }
    assert by_id["cb"] == {("received", None, "g1"), ("succeeded", None, "g1")}
    assert by_id["p"] == {("received", None, None), ("succeeded", None, None)}  # too long
