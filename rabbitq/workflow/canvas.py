"""``chain``, ``group`` and ``chord``: what a producer publishes, and how.

Each is a frozen object with its id fixed when it is made (a new uuid4 hex, or ``id=``),
so publishing the same object again (a producer's retry after a lost confirm) sends the
same message ids under the same id: duplicates the workers recognise, never a second
workflow. With a status store, the id is recorded with the workflow's shape
(:func:`~.wire.shape`) before anything is sent, and a *different* workflow under a used
id is refused (:class:`~rabbitq.WorkflowIdInUse`): its members would get the first's
message ids and be taken for its duplicates. ``await pub.publish(workflow)`` calls
:meth:`publish_on` and returns the id.

- ``chain(a, b, c)``: ``a`` is published with ``[b, c]`` in its :data:`~.wire.CHAIN`
  header; the worker publishes ``b`` (with ``[c]``) once ``a``'s handler succeeded.
- ``group([m1, ..., mN])``: every member at once, confirms pipelined, each with the
  header ``rabbitq-group``.
- ``chord([m1, ..., mN], then=cb, on_failure=alert)``: a group whose members also carry
  :data:`~.wire.CHORD`; the worker that sees the last member succeed publishes ``cb``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from .._amqp import headers as h
from ..errors import ConfigurationError, PartialPublish, PublishError, WorkflowIdInUse
from ..message import Message
from . import wire
from .chords import chord_store

WINDOW = 512  # confirms in flight at once, as publish_many's


class Sender(Protocol):
    """What publishing a workflow needs of a :class:`~rabbitq.Publisher`."""

    def publish(
        self,
        message: Message,
        *,
        message_id: str | None = ...,
        headers: Mapping[str, Any] | None = ...,
    ) -> Awaitable[str]: ...


async def _publish_all(pub: Sender, items: list[tuple[Message, str, dict[str, Any]]]) -> None:
    """Publish ``(message, message_id, headers)`` with pipelined confirms; if any is not
    confirmed, the others are still awaited and :class:`~rabbitq.PartialPublish` says
    which (publishing the same workflow object again sends the missing ones)."""
    confirmed: list[str] = []
    failed: list[tuple[str, PublishError]] = []
    for start in range(0, len(items), WINDOW):
        batch = items[start : start + WINDOW]
        results = await asyncio.gather(
            *(pub.publish(m, message_id=mid, headers=hd) for m, mid, hd in batch),
            return_exceptions=True,
        )
        for (_, mid, _), result in zip(batch, results, strict=True):
            if isinstance(result, PublishError):
                failed.append((mid, result))
            elif isinstance(result, BaseException):
                raise result
            else:
                confirmed.append(mid)
    if failed:
        raise PartialPublish(confirmed, failed)


async def _register(app: Any, workflow_id: str, shape: str) -> None:
    """Record in ``app``'s status store that ``workflow_id`` names ``shape``; raise
    :class:`~rabbitq.WorkflowIdInUse` if it names a different workflow already. Without
    a status store (of a kind with a chord store) nothing can be checked: nothing is."""
    writer = getattr(app, "status_writer", None) if app is not None else None
    store = chord_store(writer.store) if writer is not None else None
    if store is None:
        return
    try:
        found = await store.register(workflow_id, shape)
    finally:
        await store.close()
    if not wire.same_shape(found, shape):
        raise WorkflowIdInUse(
            f"workflow id {workflow_id!r} already names a different workflow "
            f"({found.partition(' ')[2]}); this {shape.partition(' ')[2]} was not "
            "published: give it an id of its own (the default, a new uuid4 hex, is)"
        )


def _members(members: Iterable[Message], bound: int, what: str) -> tuple[Message, ...]:
    out = tuple(members)
    if not out:
        raise ConfigurationError(f"a {what} needs at least one member")
    if len(out) > bound:
        raise ConfigurationError(f"a {what} has at most {bound} members, not {len(out)}")
    for m in out:
        wire.step_of(m)  # a Message, or a clear error now
    return out


@dataclass(frozen=True, slots=True)
class Chain:
    """Steps run one after another, each published once the one before succeeded."""

    steps: tuple[Message, ...]
    id: str

    async def publish_on(self, pub: Sender, app: Any = None) -> str:
        """Publish the first step with the rest in its header; return the chain's id."""
        first, rest = self.steps[0], [wire.step_of(m) for m in self.steps[1:]]
        await _register(app, self.id, wire.shape("chain", [wire.step_of(first), *rest], None, None))
        headers: dict[str, Any] = {h.GROUP: self.id}
        if rest:
            headers[wire.CHAIN] = wire.encode_chain(rest)
        await pub.publish(first, message_id=wire.member_id(self.id, 0), headers=headers)
        return self.id


@dataclass(frozen=True, slots=True)
class Group:
    """Members published together, handled in parallel."""

    members: tuple[Message, ...]
    id: str

    async def publish_on(self, pub: Sender, app: Any = None) -> str:
        """Publish every member (confirmed); return the group's id."""
        steps = [wire.step_of(m) for m in self.members]
        await _register(app, self.id, wire.shape("group", steps, None, None))
        await _publish_all(
            pub,
            [
                (m, wire.member_id(self.id, i), {h.GROUP: self.id})
                for i, m in enumerate(self.members)
            ],
        )
        return self.id


@dataclass(frozen=True, slots=True)
class Chord:
    """A group whose callback ``then`` is published once every member succeeded."""

    members: tuple[Message, ...]
    then: Message
    on_failure: Message | None
    id: str

    async def publish_on(self, pub: Sender, app: Any = None) -> str:
        """Publish every member (confirmed); return the chord's id. ``app`` (the
        publisher's) must have a status store: the workers count the members there."""
        if app is not None and getattr(app, "status_writer", "") is None:
            raise ConfigurationError(
                "chord() needs a status store, where its members are counted: "
                f"App(queue={app.queue!r}, status=PostgresStore(...) or RedisStore(...))"
            )
        then = wire.step_of(self.then)
        fail = None if self.on_failure is None else wire.step_of(self.on_failure)
        n = len(self.members)
        steps = [wire.step_of(m) for m in self.members]
        await _register(app, self.id, wire.shape("chord", steps, then, fail))
        await _publish_all(
            pub,
            [
                (
                    m,
                    wire.member_id(self.id, i),
                    {h.GROUP: self.id, wire.CHORD: wire.encode_chord(i, n, then, fail)},
                )
                for i, m in enumerate(self.members)
            ],
        )
        return self.id


def chain(*steps: Message, id: str | None = None) -> Chain:
    """``chain(a, b, c)``: ``b`` is published once ``a``'s handler succeeded, ``c`` after
    ``b``'s. The rest of the chain travels with each step (at most 32 KiB of JSON)."""
    if len(steps) == 1 and not isinstance(steps[0], Message):
        steps = tuple(steps[0])  # chain([a, b, c]) too
    checked = _members(steps, wire.MAX_GROUP, "chain")
    wire.encode_chain([wire.step_of(m) for m in checked[1:]])  # too big: an error now
    return Chain(checked, wire.check_id(id or wire.new_id()))


def group(members: Iterable[Message], *, id: str | None = None) -> Group:
    """``group([m1, ..., mN])``: published together; ``publish`` returns the group id."""
    return Group(_members(members, wire.MAX_GROUP, "group"), wire.check_id(id or wire.new_id()))


def chord(
    members: Iterable[Message],
    *,
    then: Message,
    on_failure: Message | None = None,
    id: str | None = None,
) -> Chord:
    """``chord([m1, ..., mN], then=cb)``: ``cb`` is published once, after every member
    succeeded; ``on_failure`` (optional) once, when a member is dead-lettered. Needs
    ``App(status=...)``, where the members are counted (docs/workflows.md)."""
    checked = _members(members, wire.MAX_MEMBERS, "chord")
    fail = None if on_failure is None else wire.step_of(on_failure)
    wire.encode_chord(len(checked), len(checked), wire.step_of(then), fail)
    return Chord(checked, then, on_failure, wire.check_id(id or wire.new_id()))
