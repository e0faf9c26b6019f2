"""The AMQP properties of every message rabbitq publishes, one function per kind.

- :func:`new`: a typed message from :class:`~rabbitq._amqp.publisher.Publisher`;
- :func:`copy`: the worker's retry or DLQ copy of a delivery;
- :func:`replay`: the DLQ tool's copy of a dead message (replay, import);
- :func:`stored`: a message stored before it is sent (an outbox row).

Each returns pamqp's ``Basic.Properties``, which :func:`rabbitq._amqp.confirm.send_confirmed`
hands to aiormq with the body: building an ``aio_pika.Message`` per message cost more
than the rest of a publish (see docs/benchmarks.md). :func:`message_id_of` gives a
message without an id the same derived id on every attempt and in every copy.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

from pamqp.commands import Basic

from ..message import CONTENT_TYPE, Message

PERSISTENT = 2  # delivery_mode


class Identified(Protocol):
    """What :func:`message_id_of` reads (a delivery, a dead message)."""

    @property
    def body(self) -> bytes: ...
    @property
    def message_id(self) -> str | None: ...
    @property
    def timestamp(self) -> datetime | None: ...


class Source(Identified, Protocol):
    """The properties of a delivery that :func:`copy` keeps."""

    @property
    def content_type(self) -> str | None: ...
    @property
    def content_encoding(self) -> str | None: ...
    @property
    def priority(self) -> int | None: ...
    @property
    def correlation_id(self) -> str | None: ...
    @property
    def reply_to(self) -> str | None: ...
    @property
    def app_id(self) -> str | None: ...


def message_id_of(delivery: Identified, type_name: str) -> str:
    """The delivery's ``message_id``, or one derived from what every copy of it keeps.

    A message from another producer may have none. Its id is then derived from the type
    name, body and timestamp (unchanged on retry copies), so that it is the same on every
    attempt and can serve as an idempotency key; it starts with ``derived-``.
    """
    if delivery.message_id:
        return delivery.message_id
    digest = hashlib.sha256(type_name.encode())
    digest.update(b"\0" + delivery.body + b"\0")
    if delivery.timestamp is not None:
        digest.update(delivery.timestamp.isoformat().encode())
    return "derived-" + digest.hexdigest()[:32]


def new(
    message: Message,
    *,
    message_id: str | None = None,
    correlation_id: str | None = None,
    headers: Mapping[str, Any] | None = None,
    reply_to: str | None = None,
) -> Basic.Properties:
    """A new typed message, with every property DESIGN lists (the same on the wire as
    aio-pika's: an empty header table and priority 0 included)."""
    return Basic.Properties(
        content_type=CONTENT_TYPE,
        delivery_mode=PERSISTENT,
        message_type=message.type_name(),
        message_id=message_id or uuid.uuid4().hex,
        correlation_id=correlation_id or None,
        reply_to=reply_to or None,
        timestamp=datetime.now(UTC),
        headers=dict(headers) if headers else {},
        priority=0,
    )


def raw(body_type: str, *, message_id: str | None = None) -> Basic.Properties:
    """A message whose body is given as bytes (the demo's poison messages)."""
    return Basic.Properties(
        content_type=CONTENT_TYPE,
        delivery_mode=PERSISTENT,
        message_type=body_type,
        message_id=message_id or uuid.uuid4().hex,
        headers={},
        priority=0,
    )


def stored(
    type_name: str,
    *,
    message_id: str,
    correlation_id: str | None = None,
    headers: Mapping[str, Any] | None = None,
) -> Basic.Properties:
    """A message written to an outbox and sent later by the relay: :func:`new`'s
    properties, with the id, type, correlation id and headers it was stored with."""
    return Basic.Properties(
        content_type=CONTENT_TYPE,
        delivery_mode=PERSISTENT,
        message_type=type_name,
        message_id=message_id,
        correlation_id=correlation_id or None,
        timestamp=datetime.now(UTC),
        headers=dict(headers) if headers else {},
        priority=0,
    )


def copy(delivery: Source, type_name: str, headers: dict[str, Any]) -> Basic.Properties:
    """A persistent retry or DLQ copy: the standard properties unchanged.

    Not carried: ``expiration`` (a copy must not silently expire in the DLQ) and
    ``user_id`` (the broker checks it against the publishing user).
    """
    return Basic.Properties(
        headers=headers,
        content_type=delivery.content_type,
        content_encoding=delivery.content_encoding,
        delivery_mode=PERSISTENT,
        priority=delivery.priority,
        correlation_id=delivery.correlation_id,
        reply_to=delivery.reply_to,
        # aiormq would give a copy without one a new random id on every attempt
        message_id=message_id_of(delivery, type_name),
        timestamp=delivery.timestamp,
        message_type=type_name,
        app_id=delivery.app_id,
    )


def replay(
    properties: Mapping[str, Any],
    headers: dict[str, Any],
    *,
    message_id: str,
    user: str | None,
) -> Basic.Properties:
    """A dead message's copy (replay, import): its properties as read, ``headers`` as
    given, ``expiration`` (milliseconds, as on the wire) kept; ``user_id`` only if it is
    ``user``, the publishing user (the broker refuses any other)."""
    p = properties
    expiration = p.get("expiration")
    return Basic.Properties(
        headers=headers,
        content_type=p.get("content_type"),
        content_encoding=p.get("content_encoding"),
        delivery_mode=p.get("delivery_mode"),
        priority=p.get("priority"),
        correlation_id=p.get("correlation_id"),
        reply_to=p.get("reply_to"),
        expiration=None if expiration is None else str(expiration),
        message_id=message_id,
        timestamp=p.get("timestamp"),
        message_type=p.get("type"),
        user_id=p.get("user_id") if p.get("user_id") == user else None,
        app_id=p.get("app_id"),
    )
