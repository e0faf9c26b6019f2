"""What happened to every message of a chaos scenario, and the check at the end.

Handlers record each message they handled in a :class:`Ledger`: one line per message
appended with a single ``os.write`` to a file opened ``O_APPEND``, so that a record
survives the worker being killed the instant after (the kernel has it) and several
worker processes can share one file. The test collects what reached the DLQ and
:func:`tally` compares both with what the broker confirmed to the publisher.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path


class Ledger:
    """An append-only record of handled messages: ``<started> <pid> <message_id>`` lines,
    ``started`` being the unix time the handler began."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._fd: int | None = None

    def record(self, message_id: str, started: float | None = None) -> None:
        """Record one handled message (one ``write``: atomic, survives ``kill -9``)."""
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        stamp = time.time() if started is None else started
        os.write(self._fd, f"{stamp:.4f} {os.getpid()} {message_id}\n".encode())

    def entries(self) -> list[tuple[float, int, str]]:
        """Every record so far, in order: ``(unix time, pid, message_id)``."""
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text().splitlines():
            stamp, pid, mid = line.split(" ", 2)
            out.append((float(stamp), int(pid), mid))
        return out

    def handled(self) -> Counter[str]:
        """How many times each message id was handled."""
        return Counter(mid for _, _, mid in self.entries())

    def first_after(self, moment: float, pid: int | None = None) -> float | None:
        """When the first handler (of process ``pid``, if given) that began after
        ``moment`` began (unix times), if any."""
        return min(
            (t for t, p, _ in self.entries() if t > moment and pid in (None, p)), default=None
        )


@dataclass
class Tally:
    """The accounting of one scenario: every published message handled or dead-lettered."""

    published: set[str]
    handled: Counter[str]
    dead: Counter[str]
    dlq_reasons: Counter[str] = field(default_factory=Counter)
    unconfirmed: set[str] = field(default_factory=set)
    """Ids whose publish raised: not promised, but they may have been stored."""
    pending: set[str] = field(default_factory=set)
    """Ids still waiting in a queue at the end: not lost, but the scenario did not finish."""
    died: str = ""
    """Why worker processes died that the scenario did not kill (exit code, last lines)."""

    @property
    def lost(self) -> set[str]:
        """Published (confirmed) messages neither handled nor in the DLQ."""
        return self.published - set(self.handled) - set(self.dead) - self.pending

    @property
    def duplicated(self) -> int:
        """Outcomes beyond one per message: handled twice, or handled and dead-lettered."""
        extra = 0
        for mid in set(self.handled) | set(self.dead):
            extra += self.handled[mid] + self.dead[mid] - 1
        return extra

    @property
    def unexpected(self) -> set[str]:
        """Outcomes for ids never published, except unconfirmed ones (which may arrive)."""
        return (set(self.handled) | set(self.dead)) - self.published - self.unconfirmed

    def summary(self) -> str:
        return (
            f"published {len(self.published)}, handled {len(set(self.handled))}, "
            f"dead-lettered {len(set(self.dead))} {dict(self.dlq_reasons)}, "
            f"lost {len(self.lost)}, duplicated {self.duplicated}, "
            f"unconfirmed {len(self.unconfirmed)}, pending {len(self.pending)}"
        ) + (f"\n{self.died}" if self.died else "")

    def assert_nothing_lost(self) -> None:
        assert not self.lost, f"lost {len(self.lost)}: {sorted(self.lost)[:5]}; {self.summary()}"
        assert not self.unexpected, f"unexpected ids {sorted(self.unexpected)[:5]}"
        assert not self.pending, f"still queued at the end: {len(self.pending)}; {self.summary()}"
