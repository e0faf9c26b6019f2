"""What an action touches, and running it: page snapshots and jobs.

When the DLQ page is drawn, the console keeps a *snapshot*: the filters as they were
parsed (absolute times) and the :attr:`~rabbitq.dlq.DeadMessage.key` of every message
shown, by group. An action names a snapshot and a scope (one message, a selection, a
group, the whole filtered view); it then runs the :mod:`rabbitq.dlq` operation with the
same filters *and* exactly those keys, at most that many. So it never touches a message
the filter does not select, nor one that arrived after the page was drawn (its key was
not shown), whatever the queue holds by then.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from .. import dlq
from ..errors import DlqInterrupted, RabbitqError

log = logging.getLogger("rabbitq.console")

OPERATIONS = ("replay", "export", "purge")
SCOPES = ("one", "selection", "group", "filter")
MAX_SNAPSHOTS = 500
MAX_JOBS = 200


@dataclass(frozen=True, kw_only=True)
class Snapshot:
    """What one drawn page showed."""

    id: str
    queue: str  # the DLQ
    filters: dlq.Filters
    keys: tuple[str, ...]
    groups: dict[str, tuple[str, ...]]
    labels: dict[str, str]  # group id -> "reason: fingerprint label"
    drawn_at: datetime


class Snapshots:
    """The latest :data:`MAX_SNAPSHOTS` snapshots, by id."""

    def __init__(self) -> None:
        self._items: OrderedDict[str, Snapshot] = OrderedDict()

    def add(
        self,
        queue: str,
        filters: dlq.Filters,
        keys: Iterable[str],
        groups: dict[str, tuple[str, ...]] | None = None,
        labels: dict[str, str] | None = None,
    ) -> Snapshot:
        """Remember a drawn page."""
        snap = Snapshot(
            id=secrets.token_hex(8),
            queue=queue,
            filters=filters,
            keys=tuple(keys),
            groups=groups or {},
            labels=labels or {},
            drawn_at=datetime.now(UTC),
        )
        self._items[snap.id] = snap
        while len(self._items) > MAX_SNAPSHOTS:
            self._items.popitem(last=False)
        return snap

    def get(self, snapshot_id: str) -> Snapshot | None:
        """The snapshot, or None if unknown or forgotten."""
        return self._items.get(snapshot_id)


class ScopeError(ValueError):
    """An action's scope does not name anything on the page it came from."""


def select(
    snap: Snapshot, scope: str, *, group: str | None = None, chosen: Iterable[str] = ()
) -> tuple[tuple[str, ...], str]:
    """``(keys, description)`` of what ``scope`` names on ``snap`` (pure)."""
    if scope in ("filter", "one"):
        keys = snap.keys
        what = "this message" if scope == "one" else "every message shown by the filter"
    elif scope == "group":
        if group is None or group not in snap.groups:
            raise ScopeError("that group is not on the page: reload it")
        keys = snap.groups[group]
        label = snap.labels.get(group)
        what = f"the group {label}" if label else "the group"
    elif scope == "selection":
        wanted = set(chosen)
        keys = tuple(k for k in snap.keys if k in wanted)
        what = "the selected messages"
    else:
        raise ScopeError(f"unknown scope {scope!r}")
    if not keys:
        raise ScopeError("nothing selected")
    described = snap.filters.describe()
    return keys, what + (f" ({described})" if described else "")


@dataclass(kw_only=True)
class Job:
    """One action, running or done."""

    id: str
    operation: str
    queue: str
    what: str
    count: int
    who: str
    to: str | None = None
    tally: dlq.Tally | None = None
    error: str | None = None
    done: bool = False
    export_path: Path | None = None
    started: float = field(default_factory=time.time)

    @property
    def not_found(self) -> int:
        """Selected messages not in the DLQ any more (gone since the page was drawn)."""
        if self.tally is None or not self.done or self.error is not None:
            return 0  # an interrupted job did not look at everything
        return max(0, self.count - self.tally.done - self.tally.failed)


class Jobs:
    """Running and finished jobs (the latest :data:`MAX_JOBS`)."""

    def __init__(self) -> None:
        self.items: OrderedDict[str, Job] = OrderedDict()
        self.tasks: set[asyncio.Task[None]] = set()

    def get(self, job_id: str) -> Job | None:
        """A job by id."""
        return self.items.get(job_id)

    def running(self, queue: str) -> Job | None:
        """A job still running on ``queue``, if any."""
        return next((j for j in self.items.values() if j.queue == queue and not j.done), None)

    def start(self, job: Job, work: Callable[[dlq.Progress], Awaitable[dlq.Tally]]) -> None:
        """Run ``work`` (given a progress callback) in the background for ``job``."""
        self.items[job.id] = job
        while len(self.items) > MAX_JOBS:
            oldest = next(iter(self.items))
            if not self.items[oldest].done:
                break
            self.items.popitem(last=False)
        task = asyncio.create_task(self._run(job, work))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _run(self, job: Job, work: Callable[[dlq.Progress], Awaitable[dlq.Tally]]) -> None:
        def progress(t: dlq.Tally) -> None:
            job.tally = t

        try:
            job.tally = await work(progress)
        except DlqInterrupted as exc:
            if isinstance(exc.summary, dlq.Tally):
                job.tally = exc.summary
            job.error = str(exc)
        except RabbitqError as exc:
            job.error = str(exc)
        except Exception as exc:  # shown on the job page and logged with its traceback
            log.exception("console job %s failed", job.id)
            job.error = f"{type(exc).__name__}: {exc}"
        finally:
            job.done = True
            t = job.tally
            log.info(
                "action %s by %s on %s: %s of %d selected; done %s, failed %s, "
                "possible duplicates %s%s",
                job.operation,
                job.who,
                job.queue,
                job.what,
                job.count,
                t.done if t else 0,
                t.failed if t else 0,
                t.possible_duplicates if t else 0,
                f"; error: {job.error}" if job.error else "",
            )


def new_job_id() -> str:
    """A fresh job id."""
    return secrets.token_hex(6)


def operation_filters(snap: Snapshot, keys: Iterable[str]) -> dlq.Filters:
    """The filters of the page plus exactly ``keys``."""
    return replace(snap.filters, keys=frozenset(keys))
