"""The series of ordered handlers (docs/ordering.md): keys blocked after a dead letter
(``on_dead="block"``), and what a ready worker's ``/readyz`` says of them. Part of
:class:`rabbitq._ops.metrics.Metrics`."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge

from .watch_series import WatchSeries

SHOWN_KEYS = 5
"""``/readyz`` names at most this many blocked keys per queue (then "and N more")."""


class OrderingSeries(WatchSeries):
    """``rabbitq_ordered_keys_blocked``; a blocked key keeps the worker ready (the other
    keys go on) and ``/readyz`` says which after "ready"."""

    def _ordering_series(self, r: CollectorRegistry) -> None:
        self._blocked: dict[str, str] = {}  # queue -> its line for /readyz
        self.keys_blocked_gauge = Gauge(
            "rabbitq_ordered_keys_blocked",
            "Keys of ordered handlers blocked behind a dead letter (on_dead='block') until "
            "a message of theirs is replayed from the DLQ.",
            ["queue"],
            registry=r,
            multiprocess_mode="livesum",
        )

    def keys_blocked(self, queue: str, keys: tuple[str, ...]) -> None:
        """The ordered keys blocked in this worker now."""
        self.keys_blocked_gauge.labels(queue).set(len(keys))
        rest = {q: line for q, line in self._blocked.items() if q != queue}
        if keys:
            named = ", ".join(repr(k) for k in keys[:SHOWN_KEYS])
            more = f" and {len(keys) - SHOWN_KEYS} more" if len(keys) > SHOWN_KEYS else ""
            rest[queue] = (
                f"{queue}: keys blocked behind a dead letter: {named}{more} "
                f"(rabbitq dlq replay to unblock)"
            )
        self._blocked = rest

    def ready_detail(self) -> str | None:
        """What a ready worker's ``/readyz`` adds after "ready": DLQs that drop, keys
        blocked."""
        parts = [p for p in (super().ready_detail(), *self._blocked.values()) if p]
        return "; ".join(parts) or None
