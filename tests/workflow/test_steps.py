"""The worker's side of a chord, against an in-memory chord store: who sends the
callback, who waits, who acks."""

from __future__ import annotations

from typing import Any

import pytest

from rabbitq import Message, RetryLater
from rabbitq._amqp import headers as h
from rabbitq.workflow import steps, wire


class Done(Message, type="test.wfsteps.done"):
    n: int


class Memory:
    """The claim rules of the real stores, in a dict."""

    def __init__(self) -> None:
        self.members: dict[str, dict[int, str]] = {}
        self.claims: dict[tuple[str, str], str] = {}
        self.sends = 0

    async def mark(self, group_id: str, index: int, message_id: str) -> int:
        self.members.setdefault(group_id, {})[index] = message_id
        return len(self.members[group_id])

    async def claim(self, group_id: str, kind: str, token: str, lease: float) -> str:
        held = self.claims.get((group_id, kind))
        if held == "sent":
            return wire.SENT
        if held is None or held == token:
            self.claims[(group_id, kind)] = token
            return wire.NEW
        return wire.SAME if held.split("/")[0] == token.split("/")[0] else wire.OTHER

    async def sent(self, group_id: str, kind: str) -> None:
        self.claims[(group_id, kind)] = "sent"

    async def release(self, group_id: str, kind: str, token: str) -> None:
        if self.claims.get((group_id, kind)) == token:
            del self.claims[(group_id, kind)]


def _flow(store: Memory, index: int, total: int, sent: list[Any]) -> steps.Flow:
    headers = {
        h.GROUP: "g",
        wire.CHORD: wire.encode_chord(index, total, wire.step_of(Done(n=total)), None),
    }

    async def send(follow_ups: Any) -> None:
        sent.extend(follow_ups)

    flow = steps.flow_of(headers, lambda: f"m{index}", store, send)  # type: ignore[arg-type]
    assert flow is not None
    return flow


async def test_the_last_member_sends_the_callback_once_with_the_derived_id():
    store, sent = Memory(), []
    for i in range(3):
        await _flow(store, i, 3, sent).succeeded()
    await _flow(store, 2, 3, sent).succeeded()  # a duplicate after it was sent
    [callback] = sent
    assert callback.message_id == wire.callback_id("g")
    assert callback.headers == {h.CALLBACK_OF: "g"} and callback.correlation_id == "g"


async def test_a_member_that_finds_another_member_holding_the_claim_acks_without_sending():
    store, sent = Memory(), []
    store.members["g"] = {0: "m0"}
    store.claims[("g", wire.THEN)] = "0/deadbeef"  # member 0's delivery, sending now
    await _flow(store, 1, 2, sent).succeeded()
    assert sent == []


async def test_a_duplicate_of_the_holder_waits_then_retries_later(monkeypatch):
    monkeypatch.setattr(steps, "SAME_WAIT", 0.2)
    store, sent = Memory(), []
    store.members["g"] = {0: "m0"}
    store.claims[("g", wire.THEN)] = "1/another-delivery"
    with pytest.raises(RetryLater):
        await _flow(store, 1, 2, sent).succeeded()
    assert sent == []
    store.claims[("g", wire.THEN)] = "sent"  # the holder finished meanwhile
    await _flow(store, 1, 2, sent).succeeded()
    assert sent == []


async def test_a_callback_not_confirmed_gives_its_claim_up_for_the_retry():
    store, sent = Memory(), []
    store.members["g"] = {0: "m0"}
    failing = _flow(store, 1, 2, sent)

    async def refuse(follow_ups: Any) -> None:
        raise OSError("not confirmed")

    failing.send = refuse
    with pytest.raises(OSError):
        await failing.succeeded()
    assert ("g", wire.THEN) not in store.claims  # the retry need not wait for the lease
    await _flow(store, 1, 2, sent).succeeded()  # the retry: a new delivery
    assert len(sent) == 1 and store.claims[("g", wire.THEN)] == "sent"
