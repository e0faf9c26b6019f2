"""How ``rabbitq dlq`` shows dead messages: escaped text, tables, progress, summaries.

Everything that comes from a message (body, headers, even ids) is untrusted: control
characters are escaped (an ANSI sequence or a ``\\r`` in a payload cannot move the
cursor or recolour the terminal), and text is handed to rich as plain ``Text``, never
as markup, so ``[bold]`` in a payload stays ``[bold]``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

import orjson
from rich.console import Console, Group
from rich.panel import Panel
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from .._amqp import headers as h
from ..crypto.view import reveal, shown_body
from ..dlq import DeadMessage, Tally
from ..dlq import file as dlq_file
from ..dlq.text import ERROR_WIDTH, body_text, escape, shorten, value_text

WIDE = 200  # the width of a table printed to a file or a pipe (no terminal to fit)


def age_text(seconds: float | None) -> str:
    """``42s``, ``17m``, ``5h``, ``3d``."""
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{max(0, int(seconds))}s"


# Columns that give way, in this order, when the terminal is too narrow for all of
# them: ids and types are never wrapped or cut, so that they can be copied.
_OPTIONAL = ("failed at", "attempts", "age")
_STACKED_BELOW = 30  # an error narrower than this goes under its id


def message_table(messages: Iterable[DeadMessage], title: str, width: int = 80) -> Table:
    """The ``list`` table: one row per message, for a terminal ``width`` columns wide.

    Ids, types and reasons are printed whole, on one line; the error is shortened to
    what is left, and if that is too little, failure time, attempts and age give way
    (``show`` and ``--json`` have them all). If the error would still get fewer than
    :data:`_STACKED_BELOW` columns (an 80-column terminal), it goes on the lines under
    its id instead, up to :data:`ERROR_WIDTH` characters.
    """
    now = datetime.now(UTC)
    rows: list[dict[str, str]] = []
    for m in messages:
        row = reveal(m, None).summary(now)  # an encrypted error: "encrypted (key K)"
        failed = m.failed_at
        rows.append(
            {
                "message_id": escape(row["message_id"] or "-"),
                "type": escape(row["type"] or "-"),
                "reason": escape(row["reason"] or "-"),
                "attempts": str(row["attempts"] or "-"),
                "failed at": failed.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")
                if failed
                else "-",
                "age": age_text(row["age_seconds"]),
                "error": escape(row["error"] or "-"),
            }
        )
    columns = ["message_id", "type", "reason", "attempts", "failed at", "age", "error"]

    def needed(names: list[str], error: int = _STACKED_BELOW) -> int:
        widths = [max([len(n), *(len(r[n]) for r in rows)]) for n in names if n != "error"]
        return sum(widths) + 3 * len(names) + 1 + error  # "│ x " per column, "│"

    for optional in _OPTIONAL:
        if needed(columns) <= width:
            break
        columns.remove(optional)
    if needed(columns) > width:  # still too narrow: the error goes under its id
        return _stacked(rows, [c for c in columns if c != "error"], title)
    error_width = max(_STACKED_BELOW, min(ERROR_WIDTH, width - needed(columns, 0)))
    table = Table(title=Text(escape(title)), title_justify="left")
    for name in columns:
        if name == "error":
            table.add_column(name, no_wrap=True, max_width=error_width)
        else:
            longest = max([len(name), *(len(r[name]) for r in rows)])
            table.add_column(name, no_wrap=True, min_width=longest)
    for r in rows:
        error = shorten(r["error"], error_width)
        table.add_row(*(Text(error if n == "error" else r[n]) for n in columns))
    return table


def _stacked(rows: list[dict[str, str]], columns: list[str], title: str) -> Table:
    """The ``list`` table with each error under its id, folded to the id's width."""
    table = Table(title=Text(escape(title)), title_justify="left")
    for name in columns:
        longest = max([len(name), *(len(r[name]) for r in rows)])
        if name == "message_id":  # the error folds within the id's width
            table.add_column("message_id / error", width=longest, overflow="fold")
        else:
            table.add_column(name, no_wrap=True, min_width=longest)
    for r in rows:
        first = Text(r["message_id"])
        first.append("\n" + shorten(r["error"], ERROR_WIDTH), style="dim")
        table.add_row(first, *(Text(r[n]) for n in columns[1:]))
    return table


def message_detail(m: DeadMessage) -> Group:
    """The ``show`` view: summary, properties, headers, body, traceback."""
    summary = m.summary()
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column()
    for key in ("message_id", "type", "reason", "attempts", "failed_at", "queue", "error"):
        facts.add_row(key, Text(value_text(summary[key]) if summary[key] is not None else "-"))
    props = Table(title="properties", title_justify="left", show_header=False)
    props.add_column(style="bold")
    props.add_column(overflow="fold")
    for key, value in sorted(m.properties.items()):
        props.add_row(key, Text(value_text(value)))
    props.add_row("redelivered", Text(str(m.redelivered)))
    headers = Table(title="headers", title_justify="left", show_header=False)
    headers.add_column(style="bold", overflow="fold")
    headers.add_column(overflow="fold")
    for key, value in sorted(m.headers.items()):
        if key != h.TRACEBACK:
            headers.add_row(Text(escape(key)), Text(value_text(value)))
    kind, text = shown_body(m) or body_text(m.body)
    parts: list[Any] = [facts, props, headers, Panel(Text(text), title=f"body ({kind})")]
    if m.traceback:
        parts.append(Panel(Text(escape(m.traceback, multiline=True)), title="traceback"))
    return Group(*parts)


def detail_json(m: DeadMessage) -> dict[str, Any]:
    """``show --json``: the export record plus what rabbitq reads from it."""
    record = orjson.loads(dlq_file.dumps(m.record()))
    return {**m.summary(), "record": record}


def tally_text(t: Tally) -> str:
    """The one-line summary at the end of replay, export, import and purge."""
    done = {
        "replay": "would move" if t.dry_run else "moved",
        "purge": "would delete" if t.dry_run else "deleted",
        "export": "exported",
        "import": "imported",
        "rewrap": "moved under the current key",
    }.get(t.operation, "done")
    into = [q for q in t.into if q != t.queue]
    parts = [f"{done} {t.done}" + (f" into {', '.join(into)}" if into else "")]
    if t.operation != "import":
        parts.append(f"skipped {t.skipped} (not matching, left in {t.queue})")
    parts.append(f"failed {t.failed}")
    if t.operation in ("replay", "import", "rewrap"):
        parts.append(f"possible duplicates {t.possible_duplicates}")
    text = f"{t.operation} {t.queue}: " + ", ".join(parts) + f" in {t.elapsed:.1f}s"
    for why, count in sorted(t.failures.items()):
        text += f"\n  {count} failed: {escape(why)}"
    if t.other_consumers:
        text += (
            f"\n  note: {t.other_consumers} other consumer(s) were reading {t.queue}; the "
            "messages they hold were not seen (an interrupted run's come back once the "
            "broker notices it is gone: run the command again)"
        )
    return text


class ProgressView:
    """The progress callback: a rich bar when stderr is a terminal, else a plain line on
    stderr every few seconds (unless ``plain`` is false); nothing when not ``enabled``."""

    PLAIN_EVERY = 2.0
    BAR_EVERY = 0.1

    def __init__(self, label: str, *, enabled: bool = True, plain: bool = True) -> None:
        self.label = label
        self.console = Console(stderr=True, highlight=False)
        self.live = enabled and self.console.is_terminal
        self.enabled = self.live or (enabled and plain)
        self._last = time.monotonic()  # the first plain line after PLAIN_EVERY seconds
        self._bar: Progress | None = None
        self._task: Any = None

    def __enter__(self) -> ProgressView:
        if self.live:
            self._bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[done]} done, {task.fields[rate]} msg/s"),
                TimeRemainingColumn(),
                console=self.console,
                transient=True,
            )
            self._bar.start()
            self._task = self._bar.add_task(self.label, total=None, done=0, rate="-")
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._bar is not None:
            self._bar.stop()

    def __call__(self, t: Tally) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last < (self.BAR_EVERY if self.live else self.PLAIN_EVERY):
            return
        self._last = now
        rate = f"{t.done / t.elapsed:.0f}" if t.elapsed > 0 else "-"
        if self._bar is not None:
            self._bar.update(
                self._task, completed=t.scanned, total=t.total or None, done=t.done, rate=rate
            )
        else:
            print(
                f"{self.label}: {t.scanned}/{t.total} looked at, {t.done} done, "
                f"{t.skipped} skipped, {t.failed} failed, {rate} msg/s",
                file=sys.stderr,
                flush=True,
            )
