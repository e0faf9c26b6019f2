"""How a workflow travels with its messages, and its bounds (pure).

A chain's later steps travel in the header :data:`CHAIN` of the step being handled; a
chord member carries :data:`CHORD` (its index, the member count, the callback and the
``on_failure`` message). Both are one JSON text, at most :data:`MAX_HEADER_BYTES`
bytes: RabbitMQ must fit a message's headers into one frame (128 KiB by default), and
every member of a chord carries the callback again. Every member of a group, a chord or
a chain carries :data:`~rabbitq._amqp.headers.GROUP`; a callback carries
:data:`~rabbitq._amqp.headers.CALLBACK_OF`.

A step is written as ``[type name, body]``: the next step is published as it was given,
whichever service handles it, without this process knowing its model (:func:`message_of`).
Ids are derived, so that publishing a workflow object twice, or a handler run twice,
sends the same message ids (:func:`member_id`, :func:`callback_id`).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import orjson
from pydantic import BaseModel, ConfigDict

from ..errors import ConfigurationError, PermanentError
from ..message import Message

CHAIN = "rabbitq-chain"
CHORD = "rabbitq-chord"
MAX_HEADER_BYTES = 32 * 1024
"""The largest :data:`CHAIN` or :data:`CHORD` header, in bytes of JSON."""
MAX_MEMBERS = 1000
"""The most members a chord may have (its callback reads every member's result)."""
MAX_GROUP = 10_000
"""The most members a group may have."""
MAX_RESULT_BYTES = 16 * 1024
"""The largest result a handler may return, in bytes of JSON; a chord's callback reads
at most ``MAX_MEMBERS * MAX_RESULT_BYTES`` (16 MiB)."""
THEN = "then"
FAILURE = "failure"
SHAPE = "shape"  # the claim kind that records what a workflow id names (register)

# What a claim on a chord's callback (or on_failure) found; its token is
# ``<member index>/<nonce>``, a nonce per delivery (:func:`claim_token`).
NEW = "new"  # this delivery holds the claim now: send
SENT = "sent"  # the broker confirmed it before: nothing to do
OTHER = "other"  # another member holds it: its delivery is not settled until it is sent
SAME = "same"  # another delivery of this same member holds it (a duplicate, or one dead)

_NAMESPACE = uuid.UUID("0f6b7d1e-4a38-4f1c-9d55-3c9a2b7e6d10")

Step = tuple[str, Any]  # (type name, JSON body)


def new_id() -> str:
    """A new workflow id (a group's, a chord's or a chain's)."""
    return uuid.uuid4().hex


def check_id(workflow_id: str) -> str:
    """``workflow_id`` if it can be one (printable, 1 to 200 characters), else raise."""
    if not isinstance(workflow_id, str) or not 0 < len(workflow_id) <= 200:
        raise ConfigurationError(f"a workflow id is 1 to 200 characters, not {workflow_id!r}")
    if not workflow_id.isprintable():
        raise ConfigurationError(f"a workflow id is printable text, not {workflow_id!r}")
    return workflow_id


def member_id(workflow_id: str, index: int) -> str:
    """The ``message_id`` of member (or step) ``index`` of ``workflow_id``."""
    return uuid.uuid5(_NAMESPACE, f"{workflow_id}/member/{index}").hex


def callback_id(workflow_id: str, kind: str = THEN) -> str:
    """The ``message_id`` of a chord's callback (``kind`` :data:`THEN`) or of its
    ``on_failure`` message (:data:`FAILURE`): the same for every member that sends it."""
    return uuid.uuid5(_NAMESPACE, f"{workflow_id}/{kind}").hex


def shape(kind: str, members: Sequence[Step], then: Step | None, on_failure: Step | None) -> str:
    """What tells two workflows under one id apart (pure): a digest of the kind, every
    member (type and body, in order), the callback and ``on_failure``, then a
    description for a person (``chord of 3 members, then payment.receipt``)."""
    value = [kind, [list(m) for m in members], then and list(then), on_failure and list(on_failure)]
    digest = hashlib.sha256(orjson.dumps(value)).hexdigest()[:32]
    what = f"{kind} of {len(members)} member{'s' if len(members) != 1 else ''}"
    if then is not None:
        what += f", then {then[0]}"
    if on_failure is not None:
        what += f", on_failure {on_failure[0]}"
    return f"{digest} {what}"


def same_shape(a: str, b: str) -> bool:
    """Whether two :func:`shape` values are one workflow's (their digests are equal)."""
    return a.partition(" ")[0] == b.partition(" ")[0]


def run_kind(index: int) -> str:
    """The claim kind of member ``index``'s run (a chord member without an idempotency
    store runs once per chord: :class:`~rabbitq.workflow.steps.Flow`)."""
    return f"run:{index}"


def claim_token(index: int) -> str:
    """A delivery's token for member ``index``'s claims: the index, and a nonce."""
    return f"{index}/{uuid.uuid4().hex[:12]}"


def step_of(message: Message) -> Step:
    """``message`` as a step that travels in a header."""
    if not isinstance(message, Message):
        raise ConfigurationError(f"a workflow takes Message instances, not {message!r}")
    return (message.type_name(), message.model_dump(mode="json"))


class _Step(Message):
    """A step published as it was given, by a process that may not know its model."""

    model_config = ConfigDict(frozen=True, extra="allow")
    __rabbitq_type__: ClassVar[str] = ""


_classes: dict[str, type[_Step]] = {}


def message_of(step: Step) -> Message:
    """The message that publishes ``step`` unchanged (its type name and body)."""
    name, body = step
    cls = _classes.get(name)
    if cls is None:
        namespace = {"__rabbitq_type__": name, "__module__": __name__}
        cls = _classes[name] = type("Step", (_Step,), namespace)
    return cls.model_validate(body)


def _dumps(value: Any, what: str) -> str:
    text = orjson.dumps(value).decode()
    size = len(text.encode())
    if size > MAX_HEADER_BYTES:
        raise ConfigurationError(
            f"{what} is {size} bytes of JSON, above the {MAX_HEADER_BYTES}-byte bound of a "
            "workflow header: pass ids in the messages, not the data"
        )
    return text


def _loads(raw: Any) -> Any:
    if raw is None:
        return None
    if isinstance(raw, bytes | bytearray):
        raw = bytes(raw).decode()
    return orjson.loads(raw)


def encode_chain(rest: Sequence[Step]) -> str:
    """The :data:`CHAIN` header of a step followed by ``rest``."""
    return _dumps([list(s) for s in rest], f"the rest of the chain ({len(rest)} step(s))")


def chain_of(headers: Mapping[str, Any]) -> list[Step] | None:
    """The steps after this one, or None if this message is no chain step."""
    raw = _loads(headers.get(CHAIN))
    if raw is None:
        return None
    return [(str(t), b) for t, b in raw]


@dataclass(frozen=True, slots=True)
class Member:
    """What a chord member carries: its place, the count, and what to send."""

    group_id: str
    index: int
    total: int
    then: Step
    on_failure: Step | None


def encode_chord(index: int, total: int, then: Step, on_failure: Step | None) -> str:
    """The :data:`CHORD` header of member ``index`` of ``total``."""
    value = {"i": index, "n": total, "then": list(then)}
    if on_failure is not None:
        value["fail"] = list(on_failure)
    return _dumps(value, "a chord's callback and on_failure message")


def chord_of(headers: Mapping[str, Any], group_id: str | None) -> Member | None:
    """The chord membership of a delivery, or None if it is no chord member."""
    raw = _loads(headers.get(CHORD))
    if raw is None or group_id is None:
        return None
    then = raw["then"]
    fail = raw.get("fail")
    return Member(
        group_id=group_id,
        index=int(raw["i"]),
        total=int(raw["n"]),
        then=(str(then[0]), then[1]),
        on_failure=None if fail is None else (str(fail[0]), fail[1]),
    )


def encode_result(value: Any) -> bytes | None:
    """A handler's return value as JSON (None for None), bounded by
    :data:`MAX_RESULT_BYTES`: a larger one is a :class:`~rabbitq.PermanentError`."""
    if value is None:
        return None
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    try:
        data = orjson.dumps(value)
    except TypeError as exc:
        raise PermanentError(
            f"the handler returned a {type(value).__name__}, not a pydantic model or a JSON "
            f"value: {exc}"
        ) from None
    if len(data) > MAX_RESULT_BYTES:
        raise PermanentError(
            f"the handler's result is {len(data)} bytes of JSON, above the "
            f"{MAX_RESULT_BYTES}-byte bound of a result"
        )
    return data
