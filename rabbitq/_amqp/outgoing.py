"""One publish on its way to the broker: the :class:`Outgoing` record, and the steps an
app's capabilities add to every publish (the publisher's side of the stage list).

``Publisher.publish`` builds one Outgoing per message (its body encoded, its properties
and headers set) and passes it through the app's publish steps, then sends it: into the
delay ladder when ``delay`` or ``at`` is set, else to ``exchange`` with ``routing_key``.
A step is ``async (out, call_next) -> message_id``. It may change the record before
``await call_next(out)`` (encrypt the body, move it to a blob store, choose a queue by
priority, turn a publish into a delayed one) or answer without sending (a unique key
already held: the first message's id). An app without such capabilities has no steps
and its publish pays nothing for them.

The steps run in :data:`STEP_ORDER`, whatever order the app was configured in: a
duplicate is refused before anything is uploaded or encrypted, and the body is
encrypted before it is moved out of the message, so the blob is ciphertext too.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from pamqp.commands import Basic

from ..errors import ConfigurationError
from ..ladder import plan as ladder
from ..message import Message, encode

STEP_ORDER = ("unique", "debounce", "priority", "encrypt", "offload")
"""The publish steps' names, in the order they run."""


@dataclass(slots=True, kw_only=True)
class Outgoing:
    """A message being published. ``props`` are its AMQP properties (``headers`` a dict,
    ``message_id`` set); ``queue`` is where the delay ladder delivers it when due;
    ``options`` the publish keywords that belong to a step (``unique_for=``, ...)."""

    message: Message
    type_name: str
    body: bytes
    props: Basic.Properties
    exchange: str
    routing_key: str
    queue: str
    delay: float | timedelta | None = None
    at: datetime | None = None
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def message_id(self) -> str:
        assert self.props.message_id is not None  # properties.new always sets one
        return self.props.message_id

    @property
    def headers(self) -> dict[str, Any]:
        assert self.props.headers is not None  # properties.new always sets a dict
        return self.props.headers

    @property
    def delayed(self) -> bool:
        return self.delay is not None or self.at is not None


SendNext = Callable[[Outgoing], Awaitable[str]]
"""The rest of the steps and the send, as a step sees it: ``await call_next(out)``."""


class PublishStep(Protocol):
    """A step of every publish of an app; ``name`` is one of :data:`STEP_ORDER`."""

    name: str

    async def __call__(self, out: Outgoing, call_next: SendNext) -> str:
        """Act on ``out``; ``return await call_next(out)`` to send it."""
        ...


def add_step(steps: Iterable[PublishStep], step: PublishStep) -> tuple[PublishStep, ...]:
    """``steps`` with ``step`` in its place (:data:`STEP_ORDER`); one step per name."""
    if step.name not in STEP_ORDER:
        raise ValueError(f"unknown publish step {step.name!r}: not one of {STEP_ORDER}")
    kept = [s for s in steps if s.name != step.name]
    return tuple(sorted([*kept, step], key=lambda s: STEP_ORDER.index(s.name)))


KEY_STEPS = {
    "unique": "unique_for needs a store: App(backend=PostgresBackend(...) or RedisBackend(...))",
    "debounce": "debounce needs App(debounce=True, backend=...): its workers ack the superseded",
}
"""Why a publish keyword is refused when the app lacks its step (docs/control.md)."""


def require_step(steps: Iterable[PublishStep], name: str, why: str) -> None:
    """A ConfigurationError saying ``why`` unless ``steps`` has the step ``name``."""
    if not any(step.name == name for step in steps):
        raise ConfigurationError(why)


def compose(steps: Iterable[PublishStep], last: SendNext) -> SendNext:
    """``steps`` around ``last``, the first of them outermost (no steps: ``last``)."""
    send = last
    for step in reversed(tuple(steps)):
        send = _bind(step, send)
    return send


def _bind(step: PublishStep, rest: SendNext) -> SendNext:
    def run(out: Outgoing) -> Awaitable[str]:
        return step(out, rest)

    return run


def outgoing(
    app: Any,
    message: Message,
    props: Basic.Properties,
    *,
    delay: float | timedelta | None,
    at: datetime | None,
    priority: int,
    unique_for: float | None,
    unique_key: str | None,
    debounce: float | None,
) -> Outgoing:
    """The record of one publish of ``message`` by ``app``, its keywords checked before
    any step acts: a bad delay, or a keyword whose step the app lacks, is refused here,
    before anything is sent (a bad priority, by the publisher: amqp.lanes)."""
    if delay is not None or at is not None:
        ladder.due_in(delay=delay, at=at)
    name = message.type_name()
    out = Outgoing(
        message=message, type_name=name, body=encode(message), props=props,
        exchange=app.exchange, routing_key=name, queue=app.queue, delay=delay, at=at,
        options={"priority": priority} if priority else {},
    )  # fmt: skip
    if unique_for is not None or unique_key is not None or debounce is not None:
        step = "unique" if debounce is None else "debounce"
        require_step(app.publish_steps, step, KEY_STEPS[step])
        out.options.update(unique_for=unique_for, unique_key=unique_key, debounce=debounce)
    return out
