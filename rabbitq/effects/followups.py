"""Follow-up messages: what a handler publishes with ``ctx.publish``, and how they travel.

A follow-up carries the incoming ``correlation_id`` (else the incoming ``message_id``)
and a ``rabbitq-causation-id`` header with the incoming ``message_id``. Its own
``message_id`` is derived from the idempotency key (else the incoming ``message_id``)
and its position, so that a handler run again after a crash publishes the *same* ids
and an idempotent consumer downstream recognises the repeats. Its publish keywords
(``delay=``, ``priority=``, ``unique_for=``) travel with it to the worker, which sends
it through the app's publisher as ``publish`` would. All pure.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from ..errors import ConfigurationError
from ..ladder import plan as ladder
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
    options: Mapping[str, Any] = field(default_factory=dict)
    """Its keywords for ``Publisher.publish`` (``delay``, ``priority``, ``unique_for``)."""

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
    options: Mapping[str, Any] | None = None,
) -> FollowUp:
    """The follow-up ``message``, ``position``-th of the delivery ``incoming_id``."""
    return FollowUp(
        message=message,
        message_id=follow_up_id(origin, position),
        correlation_id=incoming_correlation or incoming_id,
        headers={**(headers or {}), CAUSATION_ID: incoming_id},
        options=dict(options or {}),
    )


def publish_options(
    *, delay: float | timedelta | None, priority: int, unique_for: float | None
) -> dict[str, Any]:
    """A follow-up's publish keywords, checked as far as they can be without the app: a
    bad delay (:class:`~rabbitq.DelayError`), a priority that is not a level from 0, a
    ``unique_for`` that is not positive seconds. What needs the app (its number of
    priorities, a store for ``unique_for``) is checked by its publisher, as ``publish``
    does. Only what is set is kept: no keyword, no option."""
    options: dict[str, Any] = {}
    if delay is not None:
        ladder.due_in(delay=delay, at=None)
        options["delay"] = delay
    if priority:
        if isinstance(priority, bool) or not isinstance(priority, int) or priority < 0:
            raise ConfigurationError(f"priority must be a level from 0, not {priority!r}")
        options["priority"] = priority
    if unique_for is not None:
        if isinstance(unique_for, bool) or not isinstance(unique_for, int | float):
            raise ConfigurationError(f"unique_for must be seconds, not {unique_for!r}")
        if not unique_for > 0:
            raise ConfigurationError(f"unique_for must be positive seconds, not {unique_for!r}")
        options["unique_for"] = unique_for
    return options
