"""Follow-up messages: what a handler publishes with ``ctx.publish``, and how they travel.

A follow-up carries the incoming ``correlation_id`` (else the incoming ``message_id``)
and a ``rabbitq-causation-id`` header with the incoming ``message_id``. Its own
``message_id`` is derived from the idempotency key (else the incoming ``message_id``)
and its position, so that a handler run again after a crash publishes the *same* ids
and an idempotent consumer downstream recognises the repeats. All pure.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..message import Message

CAUSATION_ID = "rabbitq-causation-id"
_NAMESPACE = uuid.UUID("7b0c1f52-1d8e-4c55-9a51-5f3c3c2f0e11")


@dataclass(frozen=True, slots=True)
class FollowUp:
    """One follow-up message with the properties it is sent with."""

    message: Message
    message_id: str
    correlation_id: str
    headers: Mapping[str, Any] = field(default_factory=dict)

    @property
    def type_name(self) -> str:
        """The routing key it is published with on the app's exchange."""
        return self.message.type_name()


def follow_up_id(origin: str, position: int) -> str:
    """The stable ``message_id`` of the ``position``-th follow-up of ``origin``."""
    return uuid.uuid5(_NAMESPACE, f"{origin}/{position}").hex


def make_follow_up(
    message: Message,
    *,
    incoming_id: str,
    incoming_correlation: str | None,
    origin: str,
    position: int,
    headers: Mapping[str, Any] | None = None,
) -> FollowUp:
    """The follow-up ``message``, ``position``-th of the delivery ``incoming_id``."""
    return FollowUp(
        message=message,
        message_id=follow_up_id(origin, position),
        correlation_id=incoming_correlation or incoming_id,
        headers={**(headers or {}), CAUSATION_ID: incoming_id},
    )
