"""The delay ladder: any delay from 0 to 48 days, held by the broker (docs/delays.md).

``plan`` is pure: the ladder's names, arguments and bindings, a delay's units, bits and
routing key, the checks on ``delay=`` and ``at=``. ``declare`` is its only I/O. The
publisher (``publish(delay=..., at=...)``) and the worker (``RetryLater``) send through
it with :func:`plan.entry`; ``topology.declare`` declares it beside each app's queues.
"""

from .plan import (
    DELAY_TO,
    DELIVER_EXCHANGE,
    DUE,
    LEVELS,
    MAX_DELAY,
    MAX_DELAY_MS,
    UNIT_MS,
    Ladder,
    due_in,
    entry,
    hops,
    ladder,
    routing_key,
)

__all__ = [
    "DELAY_TO",
    "DELIVER_EXCHANGE",
    "DUE",
    "LEVELS",
    "MAX_DELAY",
    "MAX_DELAY_MS",
    "UNIT_MS",
    "Ladder",
    "due_in",
    "entry",
    "hops",
    "ladder",
    "routing_key",
]
