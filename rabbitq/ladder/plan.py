"""The delay ladder, as data: its names, arguments and bindings, a delay's bits and
routing key, and the checks on ``delay=`` / ``at=`` (pure, no I/O).

A delay is counted in units of :data:`UNIT_MS` (125 ms), rounded up, never down. Level
``L`` of the ladder is a topic exchange and a queue, both named
``rabbitq.delay.<queue type>.<LL>``, whose ``x-message-ttl`` is ``125 ms * 2**L``; the
queue dead-letters to the exchange of level ``L - 1`` (level 0: to
:data:`DELIVER_EXCHANGE`), keeping the message's routing key. That key is the delay's
bits, least significant first (``"1.0.1.0.0..."`` for 5 units), so exchange ``L`` sends
a message whose bit ``L`` is 1 into its queue and one whose bit ``L`` is 0 on to
exchange ``L - 1``: a message waits in the queue of each bit that is set, highest
first, and the waits add up to exactly its units. :data:`DELIVER_EXCHANGE` (headers)
then hands it to the one queue bound with ``rabbitq-delay-to: <that queue's name>``.

Keys are written least significant bit first so that a level's bindings never change
when levels are added above it. The names and arguments are a wire contract, shared by
every app on a vhost: a different unit would need new names. See docs/delays.md.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from typing import Any, Literal

from ..errors import DelayError

QueueType = Literal["classic", "quorum"]

UNIT_MS = 125
"""The ladder's precision: a delay is rounded up to a multiple of this."""
LEVELS = 25
"""Levels 0 to 24: 125 ms to 2**24 * 125 ms (24.3 days) each."""
MAX_UNITS = 2**LEVELS - 1
MAX_DELAY_MS = MAX_UNITS * UNIT_MS
"""The longest delay: 4,194,303.875 s, 48 days 13 h 5 min 3.875 s."""
MAX_DELAY = timedelta(milliseconds=MAX_DELAY_MS)
UNITS_PER_SECOND = 1000 // UNIT_MS
# A power of two: seconds * 8 is exact in binary floating point, so ceil() of it rounds
# up exactly (0.375 s is 3 units, 0.1 s is 1), as a Fraction would, at a tenth of the cost.
assert UNITS_PER_SECOND * UNIT_MS == 1000 and UNITS_PER_SECOND & (UNITS_PER_SECOND - 1) == 0

DELIVERY_LIMIT = 1_000_000_000
"""A quorum level's ``x-delivery-limit``: never reached (see :func:`level_arguments`)."""

PREFIX = "rabbitq.delay"
DELIVER_EXCHANGE = f"{PREFIX}.deliver"
"""The headers exchange the last hop dead-letters into; each app's queue is bound to it."""

UNDELIVERABLE = f"{PREFIX}.undeliverable"
"""The fanout exchange and the durable queue, both of this name, that keep a delayed
message whose queue is gone when it falls due: :data:`DELIVER_EXCHANGE`'s
``alternate-exchange``, so the last hop always routes and one undeliverable message never
holds the others back (docs/delays.md, "A queue deleted while its messages wait")."""
ALTERNATE_EXCHANGE = "alternate-exchange"

DELAY_TO = "rabbitq-delay-to"
"""Header: the name of the one queue a delayed message is delivered to."""
DUE = "rabbitq-due"
"""Header: when the message is due (ISO 8601, UTC, milliseconds), for people and checks."""

_LEVEL_NAME = re.compile(rf"^{re.escape(PREFIX)}\.(classic|quorum)\.\d\d$")
_KEY = re.compile(r"^[01](\.[01])*$")


def level_name(queue_type: QueueType, level: int) -> str:
    """``rabbitq.delay.<queue type>.<LL>``: the exchange and the queue of ``level``."""
    if not 0 <= level < LEVELS:
        raise ValueError(f"level must be 0 to {LEVELS - 1}, not {level}")
    return f"{PREFIX}.{queue_type}.{level:02d}"


def levels_pattern(queue_type: QueueType) -> str:
    """A regular expression matching the names of ``queue_type``'s levels (for the
    management API's ``name`` filter)."""
    return rf"^{re.escape(PREFIX)}\.{queue_type}\.\d\d$"


def level_ttl_ms(level: int) -> int:
    """How long a message waits in the queue of ``level``."""
    return UNIT_MS << level


def is_ladder_queue(name: str) -> bool:
    """Whether ``name`` is one of the ladder's queues (or exchanges)."""
    return bool(_LEVEL_NAME.match(name))


def units_of_ms(ms: int) -> int:
    """Whole units for ``ms`` milliseconds, rounded up."""
    return -(-ms // UNIT_MS)


def units_of_seconds(seconds: float | int) -> int:
    """Whole units for ``seconds``, rounded up exactly (a float's exact value: 0.375 s is
    3 units, 0.1 s is 1, never one unit more than needed nor less)."""
    return math.ceil(seconds * UNITS_PER_SECOND)


def hops(units: int) -> list[int]:
    """The levels a message of ``units`` waits in, highest first (its set bits)."""
    return [level for level in range(LEVELS - 1, -1, -1) if units >> level & 1]


def routing_key(units: int) -> str:
    """The delay's bits, least significant first, one word per level."""
    if not 0 <= units <= MAX_UNITS:
        raise ValueError(f"units must be 0 to {MAX_UNITS}, not {units}")
    return ".".join("1" if units >> level & 1 else "0" for level in range(LEVELS))


def is_ladder_key(key: str) -> bool:
    """Whether a routing key is a ladder key (a delayed message's, on delivery)."""
    return len(key) == 2 * LEVELS - 1 and bool(_KEY.match(key))


def entry(queue_type: QueueType, units: int) -> tuple[str, str]:
    """``(exchange, routing key)`` to publish a message of ``units`` to: the exchange of
    its highest set bit, or (no delay) the delivering exchange straight away."""
    key = routing_key(units)
    if units == 0:
        return DELIVER_EXCHANGE, key
    return level_name(queue_type, units.bit_length() - 1), key


def level_arguments(queue_type: QueueType, level: int) -> dict[str, Any]:
    """The arguments of the queue of ``level``.

    No ``x-dead-letter-routing-key``: the message keeps its key, its bits. On quorum the
    dead-lettering is at-least-once, which RabbitMQ honours only with
    ``x-overflow: reject-publish``; then a message whose next hop does not confirm it (a
    node down) stays in its level and is sent again, instead of being dropped. One whose
    app queue does not exist is routed to :data:`UNDELIVERABLE` by the delivering
    exchange's alternate exchange, on both queue types. Classic queues dead-letter at most
    once. Nothing consumes a level, but
    a person may read one (the management UI's "get messages" returns them): the
    delivery limit is set far above any number of such reads, as on a DLQ, since RabbitMQ
    4.0 gives quorum queues a limit of 20 and a message at it would be dead-lettered,
    that is sent one level down, early.
    """
    arguments: dict[str, Any] = {
        "x-message-ttl": level_ttl_ms(level),
        "x-dead-letter-exchange": level_name(queue_type, level - 1) if level else DELIVER_EXCHANGE,
    }
    if queue_type == "quorum":
        arguments |= {
            "x-queue-type": "quorum",
            "x-delivery-limit": DELIVERY_LIMIT,
            "x-dead-letter-strategy": "at-least-once",
            "x-overflow": "reject-publish",
        }
    return arguments


def deliver_arguments() -> dict[str, Any]:
    """The arguments of :data:`DELIVER_EXCHANGE`: its alternate exchange,
    :data:`UNDELIVERABLE`, takes what no app's queue is bound for."""
    return {ALTERNATE_EXCHANGE: UNDELIVERABLE}


def undeliverable_arguments(queue_type: QueueType) -> dict[str, Any]:
    """The arguments of the :data:`UNDELIVERABLE` queue when a ladder of ``queue_type``
    declares it first: no length limit, no TTL (nothing in it expires or is dropped); on
    quorum the delivery limit of a DLQ, so reading it (``rabbitq dlq list``) never
    dead-letters a message."""
    if queue_type == "quorum":
        return {"x-queue-type": "quorum", "x-delivery-limit": DELIVERY_LIMIT}
    return {}


def destination_arguments(queue: str) -> dict[str, Any]:
    """The arguments that bind ``queue`` to :data:`DELIVER_EXCHANGE`: a headers match on
    its exact name, so no other queue ever gets its delayed messages."""
    return {"x-match": "all", DELAY_TO: queue}


@dataclass(frozen=True, kw_only=True, slots=True)
class Binding:
    """``source`` exchange -> ``destination`` (a queue, or an exchange if ``to_exchange``)."""

    source: str
    destination: str
    routing_key: str
    to_exchange: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class Level:
    """One level: its exchange and queue (same name), the queue's arguments."""

    level: int
    name: str
    ttl_ms: int
    arguments: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class Ladder:
    """Every object of the ladder of one queue type. Build it with :func:`ladder`."""

    queue_type: QueueType
    levels: tuple[Level, ...]
    bindings: tuple[Binding, ...]
    deliver_exchange: str = DELIVER_EXCHANGE

    @property
    def exchanges(self) -> tuple[str, ...]:
        """The level exchanges, level 0 first (the delivering exchange is apart)."""
        return tuple(level.name for level in self.levels)


def ladder(queue_type: QueueType) -> Ladder:
    """The ladder that apps of ``queue_type`` share on a vhost."""
    levels = tuple(
        Level(
            level=n,
            name=level_name(queue_type, n),
            ttl_ms=level_ttl_ms(n),
            arguments=level_arguments(queue_type, n),
        )
        for n in range(LEVELS)
    )
    bindings: list[Binding] = []
    for n in range(LEVELS):
        name = level_name(queue_type, n)
        skip = "*." * n
        bindings.append(Binding(source=name, destination=name, routing_key=f"{skip}1.#"))
        bindings.append(
            Binding(
                source=name,
                destination=level_name(queue_type, n - 1) if n else DELIVER_EXCHANGE,
                routing_key=f"{skip}0.#",
                to_exchange=True,
            )
        )
    return Ladder(queue_type=queue_type, levels=levels, bindings=tuple(bindings))


def due_in(
    *,
    delay: float | int | timedelta | None = None,
    at: datetime | None = None,
    now: datetime | None = None,
) -> tuple[int, datetime]:
    """``(units, due time)`` for ``delay`` (seconds or a timedelta) or ``at`` (an aware
    datetime; one in the past means now). Raises :class:`~rabbitq.errors.DelayError`,
    in one line, for both or neither, a naive datetime, a negative or non-finite delay,
    or one longer than the ladder holds (:data:`MAX_DELAY`)."""
    now = now or datetime.now(UTC)
    if delay is not None and at is not None:
        raise DelayError("give delay= or at=, not both")
    if at is not None:
        if not isinstance(at, datetime):
            raise DelayError(f"at= must be a datetime, not {type(at).__name__}")
        if at.tzinfo is None or at.utcoffset() is None:
            raise DelayError(
                f"at={at.isoformat()} is a naive datetime: give it a timezone "
                "(datetime(..., tzinfo=timezone.utc) or ZoneInfo(...))"
            )
        micros = max(0, (at - now) // timedelta(microseconds=1))
        units = -(-micros // (UNIT_MS * 1000))
        due = max(at, now)
        asked = f"at={at.isoformat()} ({timedelta(microseconds=micros)} from now)"
    elif delay is not None:
        if isinstance(delay, timedelta):
            seconds: float | int | Fraction = Fraction(delay // timedelta(microseconds=1), 10**6)
        elif isinstance(delay, bool) or not isinstance(delay, int | float):
            raise DelayError(f"delay= must be seconds or a timedelta, not {delay!r}")
        else:
            seconds = delay
        if not math.isfinite(seconds) or seconds < 0:
            raise DelayError(f"delay={delay!r} must be a finite number of seconds, 0 or more")
        if seconds > MAX_DELAY_MS / 1000:
            units = MAX_UNITS + 1
        else:
            units = math.ceil(seconds * UNITS_PER_SECOND)
        asked = f"delay={float(seconds):g}s"
        due = now + timedelta(seconds=float(seconds)) if units <= MAX_UNITS else now
    else:
        raise DelayError("give delay= or at=")
    if units > MAX_UNITS:
        raise DelayError(
            f"{asked} is longer than the delay ladder holds ({MAX_DELAY}): "
            "publish it later, e.g. from a schedule"
        )
    return units, due


def due_header(due: datetime) -> str:
    """The :data:`DUE` header's value: UTC, ISO 8601, microseconds."""
    return due.astimezone(UTC).isoformat(timespec="microseconds")
