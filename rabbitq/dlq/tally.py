"""What a DLQ operation did: :class:`Tally`, updated as it goes."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .message import DeadMessage

Progress = Callable[["Tally"], None]


@dataclass(kw_only=True)
class Tally:
    """What an operation did, updated as it goes (handed to the progress callback).

    ``total`` is what the DLQ held at the start (or the file's message count);
    ``scanned`` the messages looked at; ``done`` those moved, exported, imported
    or removed; ``skipped`` those that did not match (left in the DLQ); ``failed`` those
    that could not be copied (left in the DLQ, reasons in ``failures``).
    ``possible_duplicates``: copies that may be stored while their original is still
    in the DLQ, after a lost connection; 0 when the operation finished.
    ``other_consumers``: consumers of the DLQ when it started; messages they held (an
    interrupted run's, until the broker notices it is gone) were not seen.
    """

    operation: str
    queue: str
    total: int = 0
    scanned: int = 0
    done: int = 0
    skipped: int = 0
    failed: int = 0
    possible_duplicates: int = 0
    other_consumers: int = 0
    dry_run: bool = False
    into: tuple[str, ...] = ()  # where the messages went, if not ``queue`` (import --replay)
    failures: dict[str, int] = field(default_factory=dict)
    matched: list[DeadMessage] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    def fail(self, why: str) -> None:
        """Count a message that could not be handled, and why."""
        self.failed += 1
        self.failures[why] = self.failures.get(why, 0) + 1

    @property
    def elapsed(self) -> float:
        """Seconds since the operation started."""
        return time.monotonic() - self.started

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready summary (without the matched messages)."""
        return {
            "operation": self.operation,
            "queue": self.queue,
            "dry_run": self.dry_run,
            "total": self.total,
            "scanned": self.scanned,
            "done": self.done,
            "skipped": self.skipped,
            "failed": self.failed,
            "possible_duplicates": self.possible_duplicates,
            "other_consumers": self.other_consumers,
            "failures": self.failures,
            "seconds": round(self.elapsed, 3),
        } | ({"into": list(self.into)} if self.into else {})
