"""Every copy rabbitq publishes of a message it read, and where each goes (pure).

- :func:`retry`: the worker's copy of a failed delivery, to the retry queue of the
  decision's delay (``rabbitq-attempt`` + 1, the error, the origin);
- :func:`dead_letter`: the worker's copy to the DLQ (the reason, error, traceback,
  the queue it failed in and when);
- :func:`replay`: the DLQ tools' copy of a dead message back to work (the DLQ-only
  headers and the attempt removed, ``rabbitq-replayed`` counted);
- :func:`stored`: a dead message exactly as read (an import into a DLQ).

Each keeps the body and the producer's headers (never the broker's ``x-`` ones: see
:mod:`rabbitq._amqp.headers`), and returns a :class:`Copy` with the AMQP properties it is
published with. The worker's copies are persistent, keep the standard properties, and
drop ``expiration`` (a copy must not silently expire in the DLQ) and ``user_id`` (the
broker checks it against the publishing user); the DLQ tools' copies keep the dead
message's properties as read, ``user_id`` only if it is the publishing user's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from pamqp.commands import Basic

from ..ladder import plan as ladder
from ..outcome import DeadLetter, Retry
from . import headers as h
from . import properties
from .properties import message_id_of
from .topology import Topology


@dataclass(frozen=True, slots=True)
class Copy:
    """A message to publish: its body, its AMQP properties, and the queue it goes to
    through the default exchange (empty where the caller chooses: a replay goes to the
    message's origin or to ``--to``); or, for a wait in the delay ladder, the routing key
    ``target`` on the ladder's entry ``exchange``."""

    body: bytes
    properties: Basic.Properties
    target: str = ""
    exchange: str = ""


class Delivered(properties.Source, Protocol):
    """What the worker's copies read of a delivery."""

    @property
    def headers(self) -> Mapping[str, Any]: ...
    @property
    def exchange(self) -> str | None: ...
    @property
    def routing_key(self) -> str | None: ...


class Dead(properties.Identified, Protocol):
    """What the DLQ tools' copies read of a dead message."""

    @property
    def properties(self) -> Mapping[str, Any]: ...
    @property
    def headers(self) -> Mapping[str, Any]: ...
    @property
    def type(self) -> str | None: ...


def retry(
    delivery: Delivered,
    decision: Retry,
    *,
    type_name: str,
    error: str,
    topology: Topology,
    queue: str,
    now: datetime | None = None,
) -> Copy:
    """The retry copy of ``delivery``, which failed in ``queue``: to the retry queue of
    ``decision``'s delay, or (``decision.ladder``: a ``RetryLater`` of any delay; or
    ``queue`` a priority lane above 0) into the delay ladder, addressed to ``queue`` only
    and due ``now`` plus the delay."""
    headers = h.retry_headers(
        delivery.headers,
        next_attempt=decision.next_attempt,
        error=error,
        exchange=delivery.exchange or "",
        routing_key=delivery.routing_key or "",
    )
    if decision.ladder or any(lane.name == queue for lane in topology.lanes):
        # (a priority lane's retries wait in the ladder too: the retry queues expire into
        # the main queue, lane 0; see amqp.lanes)
        due = (now or datetime.now(UTC)) + timedelta(milliseconds=decision.delay_ms)
        headers |= {ladder.DELAY_TO: queue, ladder.DUE: ladder.due_header(due)}
        units = ladder.units_of_ms(decision.delay_ms)
        exchange, key = ladder.entry(topology.ladder.queue_type, units)
        return Copy(delivery.body, properties.copy(delivery, type_name, headers), key, exchange)
    target = topology.retry_queue(decision.delay_ms).name
    return Copy(delivery.body, properties.copy(delivery, type_name, headers), target)


def dead_letter(
    delivery: Delivered,
    decision: DeadLetter,
    *,
    type_name: str,
    error: str,
    traceback: str | None,
    attempt: int,
    queue: str,
    topology: Topology,
) -> Copy:
    """The DLQ copy of ``delivery``, which failed in ``queue`` on ``attempt``."""
    headers = h.dead_letter_headers(
        delivery.headers,
        reason=decision.reason,
        error=error,
        traceback=traceback,
        queue=queue,
        attempt=attempt,
        exchange=delivery.exchange or "",
        routing_key=delivery.routing_key or "",
    )
    return Copy(delivery.body, properties.copy(delivery, type_name, headers), topology.dlq.name)


def _count(value: Any) -> int:
    if isinstance(value, bool):
        return 0
    if isinstance(value, bytes | str):
        text = value.decode("ascii", "replace") if isinstance(value, bytes) else value
        return int(text) if text.strip().isascii() and text.strip().isdigit() else 0
    return value if isinstance(value, int) and value > 0 else 0


def replay_headers(headers: Mapping[str, Any]) -> dict[str, Any]:
    """Headers of a replayed copy: the DLQ-only ones and the attempt removed (the next
    delivery is attempt 1), ``rabbitq-replayed`` incremented, the broker's ``x-``
    headers summarised in ``rabbitq-deaths`` (see :func:`rabbitq._amqp.headers.deaths`),
    everything else kept."""
    dropped = {*h.DLQ_ONLY, h.ATTEMPT, h.UNBLOCK}  # an unblock is asked for per replay
    out = {k: v for k, v in h.copy_headers(headers).items() if k not in dropped}
    out[h.REPLAYED] = _count(headers.get(h.REPLAYED)) + 1
    return out


def _of_dead(m: Dead, headers: dict[str, Any], *, user: str | None) -> Copy:
    # aiormq gives a message without an id a random one; the worker's derived id
    # keeps it stable instead.
    message_id = m.message_id or message_id_of(m, m.type or "")
    props = properties.replay(m.properties, headers, message_id=message_id, user=user)
    return Copy(m.body, props)


def replay(m: Dead, *, user: str | None = None, unblock: bool = False) -> Copy:
    """The copy that replay publishes: body and properties unchanged, headers per
    :func:`replay_headers`. ``user_id`` is kept only if it is ``user`` (the broker
    refuses any other). ``unblock``: the copy lifts the block of its ordered key
    (``rabbitq-unblock``), whichever message of the key blocked it."""
    headers = replay_headers(m.headers)
    if unblock:
        headers[h.UNBLOCK] = 1
    return _of_dead(m, headers, user=user)


def stored(m: Dead, *, user: str | None = None) -> Copy:
    """The message exactly as read (import puts it back into a DLQ this way)."""
    return _of_dead(m, dict(m.headers), user=user)
