"""CopyStore's decisions, without a broker: an unroutable copy re-declares the topology
and is sent again; a refused one holds the message (consumer paused, sent again on a new
channel, readiness told); a worker that stops gives up a held copy."""

from __future__ import annotations

import pytest
from pamqp.commands import Basic

from rabbitq._worker import copies
from rabbitq.errors import PublishInterrupted, PublishNacked, Unroutable
from rabbitq.hooks import Hooks


class Events(Hooks):
    def __init__(self) -> None:
        self.held: list[tuple[int, str | None]] = []

    def copies_held(self, queue: str, held: int, reason: str | None) -> None:
        self.held.append((held, reason))


class Consumer:
    """Records what the store asks of the consumer (rabbitq._worker.consumer.Consumer)."""

    def __init__(self, calls: list[str], stopping) -> None:
        self.calls, self._stopping = calls, stopping
        self.paused: list[tuple[str, str]] = []

    def pause(self, reason: str, why: str) -> None:
        self.calls.append("pause")
        self.paused.append((reason, why))

    def resume(self, reason: str) -> None:
        self.calls.append("resume")

    @property
    def stopping(self) -> bool:
        return self._stopping()


def store(monkeypatch, answers, *, stopping=lambda: False):
    """A CopyStore whose sends answer ``answers`` in turn (an exception or None)."""
    calls: list[str] = []
    sent: list[str] = []

    async def send(channel, exchange, routing_key, body, properties):
        sent.append(routing_key)
        answer = answers.pop(0)
        if answer is not None:
            raise answer

    monkeypatch.setattr(copies, "send_confirmed", send)
    monkeypatch.setattr(copies, "HOLD_FIRST_WAIT", 0.0)

    async def record(name):
        calls.append(name)

    events = Events()
    consumer = Consumer(calls, stopping)
    s = copies.CopyStore(
        "q",
        ["q", "q.retry.1s", "q.dlq"],
        channel=lambda: object(),  # type: ignore[arg-type,return-value]
        redeclare=lambda reason: record(f"redeclare:{reason}"),
        consumer=consumer,
        renew=lambda: record("renew"),
        hooks=events,
    )
    monkeypatch.setattr(copies, "hold_waits", lambda *a: iter([0.0] * 100))
    events.consumer = consumer
    return s, calls, sent, events


async def test_an_unroutable_copy_to_an_own_queue_redeclares_and_is_sent_again(monkeypatch):
    s, calls, sent, events = store(monkeypatch, [Unroutable("gone"), None])
    await s.store("q.dlq", b"", Basic.Properties())
    assert calls == ["redeclare:unroutable"]
    assert sent == ["q.dlq", "q.dlq"] and not events.held


async def test_a_refused_copy_holds_the_message_until_the_queue_takes_it(monkeypatch):
    s, calls, sent, events = store(
        monkeypatch, [PublishNacked("full"), PublishNacked("full"), None]
    )
    await s.store("q.dlq", b"", Basic.Properties())
    assert calls == ["pause", "renew", "renew", "resume"]
    assert events.held[0][0] == 1 and "the copy to q.dlq" in (events.held[0][1] or "")
    assert events.held[-1] == (0, None)
    why = f"holding messages of q: {events.held[0][1]}"
    assert events.consumer.paused == [("copies_held", why)]
    assert len(sent) == 3


async def test_a_stopping_worker_gives_up_a_held_copy(monkeypatch):
    s, calls, _, events = store(monkeypatch, [PublishNacked("full")], stopping=lambda: True)
    with pytest.raises(PublishInterrupted, match="stopping while the copy was held"):
        await s.store("q.dlq", b"", Basic.Properties())
    assert "pause" not in calls  # it never started holding


async def test_an_interrupted_copy_is_raised_for_the_worker_to_return_the_message(monkeypatch):
    s, calls, _, _ = store(monkeypatch, [PublishInterrupted("connection lost")])
    with pytest.raises(PublishInterrupted):
        await s.store("q.retry.1s", b"", Basic.Properties())
    assert calls == []


def test_a_nack_from_a_queue_with_a_length_limit_is_worded_full() -> None:
    reason = copies.nack_reason("q.dlq", {"x-max-length": 10, "x-overflow": "reject-publish"})
    assert reason == "q.dlq refused the copy (full: its length limit)"


def test_a_nack_from_a_queue_without_a_length_limit_is_not_worded_full() -> None:
    """A quorum DLQ without a reachable leader nacks (a partition, issue #33): not full."""
    reason = copies.nack_reason("q.dlq", {"x-queue-type": "quorum", "x-overflow": "reject-publish"})
    assert "full" not in reason and "length limit" in reason
    assert reason.startswith("the broker did not store the copy to q.dlq")
    assert "no quorum leader reachable?" in reason
    unknown = copies.nack_reason("elsewhere", None)  # not a queue the app declares
    assert "the broker did not store the copy to elsewhere" in unknown
    assert "no quorum leader reachable?" in unknown


async def test_a_held_copy_says_what_is_known_of_its_queue(monkeypatch):
    s, calls, sent, events = store(monkeypatch, [PublishNacked("nack"), None])
    s.arguments = {"q.dlq": {"x-queue-type": "quorum", "x-overflow": "reject-publish"}}
    await s.store("q.dlq", b"", Basic.Properties())
    assert "(full" not in (events.held[0][1] or "")
    assert "no quorum leader reachable?" in (events.held[0][1] or "")
