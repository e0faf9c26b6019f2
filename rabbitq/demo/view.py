"""How ``rabbitq demo`` shows itself: the intro, the run and the summary.

During the run, :class:`View` shows a live table that updates in place (a terminal)
or a line per event and progress lines (logs), and takes over the worker's log lines
so that they do not tear the table. Everything shown comes in as arguments; it
imports the scenario's data classes, never :mod:`rabbitq.demo.run`, which imports it.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections import deque
from collections.abc import Iterator
from functools import partial
from typing import TYPE_CHECKING, Literal

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from .._amqp.topology import QueueDepth, Topology, delay_label
from ..settings import redact_url
from .scenario import DEMO_QUEUE, Counts, DemoSummary, DemoTally, Planned

if TYPE_CHECKING:
    from ..app import App

# The worker's logger, by its name (a documented one), not by importing the worker.
worker_log = logging.getLogger("rabbitq.worker")

Display = Literal["live", "plain", "none"]

# "message pay-03 (demo.payment.capture) failed ...", "... dead-lettered to q.dlq (...)":
# the ids are readable and there is one DLQ, so the type and the DLQ's name go.
_WORKER_LINE = re.compile(r"^message (\S+) \([\w.-]+\) |(?<=dead-lettered) to \S+")


def _stamped(seconds: float, text: str) -> str:
    """A line of the run, prefixed with the seconds since it started."""
    return f"{seconds:6.1f}s  {text}"


def print_intro(console: Console, app: App, batch: list[Planned], url: str) -> None:
    """What the demo is about to do, one line per kind of message."""
    out = partial(console.out, highlight=False)
    topology = app.topology()
    tiers = ", then ".join(delay_label(ms) for ms in app.retry.delays_ms)
    out(
        f"rabbitq demo: an email and a payment handler on queue {topology.main.name!r} "
        f"at {redact_url(url)}"
    )
    out(
        f"Publishing {len(batch)} messages; a failed attempt is retried after {tiers} "
        f"({app.retry.attempts} attempts in all), then dead-lettered to {topology.dlq.name!r}."
    )
    stories: dict[str, list[str]] = {}
    for item in batch:
        stories.setdefault(item.story, []).append(item.message_id)
    for story, ids in stories.items():
        who = f"{len(ids)} ordinary emails and payments" if len(ids) > 2 else ", ".join(ids)
        out(f"  {who:<36}  {story}")
    out("")


class View:
    """The live table (a terminal) or event and progress lines (logs) during the run.

    It is also the run's clock: :meth:`elapsed` counts from its creation.
    """

    def __init__(
        self,
        console: Console,
        display: Display,
        topology: Topology,
        tally: DemoTally,
        expected: Counts,
    ) -> None:
        self.console = console
        self.display = display
        self.topology = topology
        self.tally = tally
        self.expected = expected
        self.events: deque[Text] = deque(maxlen=8)
        self.depths: tuple[QueueDepth, ...] = ()
        self.live: Live | None = None
        self._started = time.monotonic()
        self._last_line = ""
        self._last_line_at = -1.0

    def elapsed(self) -> float:
        """Seconds since the view was created."""
        return time.monotonic() - self._started

    def __enter__(self) -> View:
        if self.display == "live":
            self.live = Live(self.render(), console=self.console, refresh_per_second=8)
            self.live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.update(self.render())
            self.live.stop()
        elif self.display == "plain":
            self._progress(final=True)

    @contextlib.contextmanager
    def worker_logs(self) -> Iterator[None]:
        """Show the worker's log lines in the view while inside, instead of on stderr.

        Without a view (``none``, for ``--json``), only errors reach stderr: the retries
        and dead letters the demo stages are in the JSON tally.
        """
        if self.display == "none":
            level = worker_log.level
            worker_log.setLevel(logging.ERROR)
            try:
                yield
            finally:
                worker_log.setLevel(level)
            return
        handler = _ToView(self)
        saved = worker_log.level, worker_log.propagate
        worker_log.addHandler(handler)
        worker_log.setLevel(logging.INFO)
        worker_log.propagate = False
        try:
            yield
        finally:
            worker_log.removeHandler(handler)
            worker_log.setLevel(saved[0])
            worker_log.propagate = saved[1]

    def event(self, level: int, text: str) -> None:
        """One thing that happened (a worker's log line), at logging ``level``."""
        line = _stamped(self.elapsed(), text)
        if self.display == "plain":
            self.console.out(line, highlight=False)
        elif self.display == "live":
            style = "yellow" if "retrying in" in text else "red" if level >= 30 else "dim"
            self.events.append(Text(line, style=style, no_wrap=True, overflow="ellipsis"))

    def update(self, depths: tuple[QueueDepth, ...]) -> None:
        """The queues' latest depths: redraw the table, or print a progress line."""
        self.depths = depths
        if self.live is not None:
            self.live.update(self.render())
        elif self.display == "plain":
            self._progress(final=False)

    def _waiting(self) -> str:
        main = self.topology.main.name
        return ", ".join(
            f"{'main' if d.kind == 'main' else d.name.removeprefix(main + '.')} {d.messages}"
            for d in self.depths
        )

    def render(self) -> RenderableType:
        """The table of outcomes so far against the expected ones, then recent events."""
        got, want = self.tally.counts, self.expected
        want_tiers, want_reasons = want.per_tier(), want.per_reason()
        rows = [
            ("published", got.published, want.published, ""),
            ("handled", got.handled, want.handled, "green"),
            *(
                (f"retried, {t} tier", n, want_tiers[t], "yellow")
                for t, n in got.per_tier().items()
            ),
            *(
                (f"dead-lettered, {r}", n, want_reasons[r], "red")
                for r, n in got.per_reason().items()
            ),
        ]
        title = f"rabbitq demo: queue {self.topology.main.name}, {self.elapsed():.1f} s"
        table = Table(title=title)
        table.add_column("outcome")
        table.add_column("so far", justify="right")
        table.add_column("expected", justify="right")
        for label, n, total, style in rows:
            table.add_row(Text(label, style=style), str(n), f"{total}{' ✓' if n == total else ''}")
        running = self.tally.in_flight
        waiting = f"waiting in queues: {self._waiting() or '-'}; handlers running: {running}"
        return Group(table, Text(waiting, style="dim"), Text(""), *self.events)

    def _progress(self, *, final: bool) -> None:
        got, want = self.tally.counts, self.expected
        want_tiers = want.per_tier()
        tiers = ", ".join(f"{t} {n}/{want_tiers[t]}" for t, n in got.per_tier().items())
        line = (
            f"handled {got.handled}/{want.handled}, retried {tiers}, dead-lettered "
            f"{got.dead_lettered.total()}/{want.dead_lettered.total()}; "
            f"waiting in queues: {self._waiting() or '-'}"
        )
        now = self.elapsed()
        if final or (line != self._last_line and now - self._last_line_at >= 1.0):
            self.console.out(_stamped(now, line), highlight=False)
            self._last_line, self._last_line_at = line, now


class _ToView(logging.Handler):
    """Hands the worker's log lines to the view instead of stderr, where they would
    tear the live table. The worker logs only redacted URLs, never the password."""

    def __init__(self, view: View) -> None:
        super().__init__(logging.INFO)
        self.view = view

    def emit(self, record: logging.LogRecord) -> None:
        text = _WORKER_LINE.sub(lambda m: f"{m[1]} " if m[1] else "", record.getMessage())
        self.view.event(record.levelno, text)


def print_summary(
    console: Console,
    summary: DemoSummary,
    *,
    next_steps: bool = True,
    url_given: bool = False,
    dlq_tool: bool = False,
    program: str = "rabbitq",
) -> None:
    """The final tally and where to look next.

    ``program``: how the user runs rabbitq (``.venv/bin/rabbitq`` when it is not on PATH).
    ``url_given``: the broker was named with ``--url``, which the next commands need too.
    ``dlq_tool``: this installation has ``rabbitq dlq``, so it can be suggested.
    """
    got, out = summary.counts, partial(console.out, highlight=False)
    out("")
    if summary.settled:
        out(
            f"Settled in {summary.seconds:.1f} s: all {got.published} messages were handled "
            f"or dead-lettered."
        )
    else:
        out(f"Not settled after {summary.seconds:.0f} s.")
    tiers = ", ".join(f"{t} tier: {n}" for t, n in got.per_tier().items())
    reasons = ", ".join(f"{r}: {n}" for r, n in got.per_reason().items())
    out(f"  handled         {got.handled:>4}")
    out(f"  retried         {got.retried.total():>4}   ({tiers})")
    out(f"  dead-lettered   {got.dead_lettered.total():>4}   ({reasons})")
    if not next_steps:
        out("The throwaway broker is gone, and its queues with it.")
        return
    queue = summary.queue
    delays = " ".join(f"--delay {d:g}" for d in summary.retry.delays)
    own = "" if queue == DEMO_QUEUE else f" --queue {queue}"
    steps = [
        (f"{program} stats {queue} {delays}", "depths of the main, retry and DLQ queues"),
        (f"{program} demo{own} --cleanup", "delete the demo's queues and exchange"),
    ]
    if dlq_tool:
        steps.insert(1, (f"{program} dlq list {queue}", "the DLQ tool: list, show and replay"))
    out("")
    out(f"The dead-lettered messages wait in {summary.dlq!r}, each with its reason and error.")
    out("Where to look next" + (" (add the same --url):" if url_given else ":"))
    width = max(len(cmd) for cmd, _ in steps)
    for cmd, why in steps:
        out(f"  {cmd:<{width}}   {why}")
