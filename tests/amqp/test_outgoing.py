"""The publisher's steps and the delivery's capability stages: placed in their fixed
order whatever order they are added in, composed around the send (pure)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from rabbitq import App, Message
from rabbitq._amqp import properties
from rabbitq._amqp.outgoing import STEP_ORDER, Outgoing, SendNext, add_step, compose
from rabbitq.job import DELIVERY_ORDER, Job, Next, add_stage
from rabbitq.outcome import Outcome
from rabbitq.testing import deliver


class Ping(Message, type="outgoing.ping"):
    n: int


class Step:
    def __init__(self, name: str, seen: list[str], answer: str | None = None) -> None:
        self.name, self.seen, self.answer = name, seen, answer

    async def __call__(self, out: Outgoing, call_next: SendNext) -> str:
        self.seen.append(self.name)
        if self.answer is not None:
            return self.answer
        out.body += self.name.encode()
        return await call_next(out)


def outgoing() -> Outgoing:
    msg = Ping(n=1)
    return Outgoing(
        message=msg, type_name="outgoing.ping", body=b"", props=properties.new(msg),
        exchange="x", routing_key="outgoing.ping", queue="q",
    )  # fmt: skip


def test_steps_run_in_their_fixed_order_whatever_order_they_were_added() -> None:
    seen: list[str] = []
    steps: tuple[Any, ...] = ()
    for name in reversed(STEP_ORDER):
        steps = add_step(steps, Step(name, seen))
    sent: list[bytes] = []

    async def last(out: Outgoing) -> str:
        sent.append(out.body)
        return out.message_id

    out = outgoing()
    assert asyncio.run(compose(steps, last)(out)) == out.message_id
    assert seen == list(STEP_ORDER)
    assert sent == ["".join(STEP_ORDER).encode()]


def test_a_step_may_answer_without_sending() -> None:
    seen: list[str] = []
    steps = add_step(add_step((), Step("encrypt", seen)), Step("unique", seen, answer="first"))

    async def last(out: Outgoing) -> str:
        raise AssertionError("sent")

    assert asyncio.run(compose(steps, last)(outgoing())) == "first"
    assert seen == ["unique"]


def test_one_step_per_name_and_no_unknown_name() -> None:
    seen: list[str] = []
    first, second = Step("priority", seen), Step("priority", seen)
    assert add_step(add_step((), first), second) == (second,)
    with pytest.raises(ValueError, match="unknown publish step 'zip'"):
        add_step((), Step("zip", seen))


class Stage:
    def __init__(self, name: str, seen: list[str]) -> None:
        self.name, self.seen = name, seen

    async def __call__(self, job: Job, call_next: Next) -> Outcome:
        self.seen.append(self.name)
        if self.name == "decrypt":  # a stage before decode may replace the body
            job.body = job.body.replace(b"7", b"8")
        return await call_next(job)


def test_capability_stages_run_in_order_before_decode_in_rabbitq_testing() -> None:
    app = App(queue="outgoing-stages")
    seen: list[str] = []
    for name in reversed(DELIVERY_ORDER):
        app.delivery_stages = add_stage(app.delivery_stages, Stage(name, seen))
    got: list[int] = []

    @app.handler(Ping)
    async def ping(msg: Ping) -> None:
        got.append(msg.n)

    result = asyncio.run(deliver(app, Ping(n=7)))
    assert result.acked
    assert seen == list(DELIVERY_ORDER)
    assert got == [8]
    with pytest.raises(ValueError, match="unknown delivery stage"):
        add_stage((), Stage("zip", seen))
