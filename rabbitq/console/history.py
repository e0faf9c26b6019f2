"""Queue depths over time and the rates read from them (pure, no I/O).

The console samples every queue's depth every few seconds and keeps the last hour. A
rate comes from a worker's ``/metrics`` counters when one is reachable (messages in and
out per second); otherwise only the depths are known, and the change of a depth per
second (net in minus out) is all that can honestly be shown.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

WINDOW = 3600.0  # seconds of history kept and charted


@dataclass(frozen=True, kw_only=True)
class Sample:
    """One round of depths (and, when a worker's metrics were read, its counters)."""

    at: float  # time.time()
    depths: Mapping[str, int]
    consumers: Mapping[str, int]
    received: Mapping[str, float] | None = None  # queue -> rabbitq_messages_received_total
    processed: Mapping[str, float] | None = None  # queue -> rabbitq_messages_processed_total


class History:
    """The samples of the last :data:`WINDOW` seconds, oldest first."""

    def __init__(self, window: float = WINDOW) -> None:
        self.window = window
        self.samples: deque[Sample] = deque()

    def add(self, sample: Sample) -> None:
        """Append a sample and forget those older than the window."""
        self.samples.append(sample)
        while self.samples and self.samples[0].at < sample.at - self.window:
            self.samples.popleft()

    @property
    def latest(self) -> Sample | None:
        """The newest sample, if any."""
        return self.samples[-1] if self.samples else None

    def series(self, queue: str) -> list[tuple[float, int]]:
        """``(time, depth)`` of ``queue`` over the window."""
        return [(s.at, s.depths[queue]) for s in self.samples if queue in s.depths]


@dataclass(frozen=True, kw_only=True)
class Rates:
    """Per second, over the last two samples that allow it; None when unknown."""

    incoming: float | None = None
    outgoing: float | None = None
    net: float | None = None
    source: str = "none"  # "metrics", "depths" or "none"


def _counter_rate(
    new: Mapping[str, float] | None, old: Mapping[str, float] | None, queue: str, dt: float
) -> float | None:
    if new is None or old is None or queue not in new or queue not in old:
        return None
    delta = new[queue] - old[queue]
    return max(delta, 0.0) / dt  # a restarted worker resets its counters


def rates(samples: Sequence[Sample], queue: str) -> Rates:
    """Rates of ``queue`` from the last two samples (``source`` says from what)."""
    if len(samples) < 2:
        return Rates()
    new, old = samples[-1], samples[-2]
    dt = new.at - old.at
    if dt <= 0:
        return Rates()
    net = None
    if queue in new.depths and queue in old.depths:
        net = (new.depths[queue] - old.depths[queue]) / dt
    incoming = _counter_rate(new.received, old.received, queue, dt)
    outgoing = _counter_rate(new.processed, old.processed, queue, dt)
    if incoming is not None or outgoing is not None:
        return Rates(incoming=incoming, outgoing=outgoing, net=net, source="metrics")
    return Rates(net=net, source="depths" if net is not None else "none")


def counters_by_queue(
    families: Iterable[tuple[str, Mapping[str, str], float]], name: str
) -> dict[str, float]:
    """Sum the samples of counter ``name`` (``rabbitq_..._total``) per ``queue`` label, from
    ``(sample name, labels, value)`` triples as a Prometheus text parser yields them."""
    out: dict[str, float] = {}
    for sample_name, labels, value in families:
        if sample_name == name and "queue" in labels:
            out[labels["queue"]] = out.get(labels["queue"], 0.0) + value
    return out
