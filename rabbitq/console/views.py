"""What the pages show, computed from messages and samples (pure, no I/O)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from markupsafe import Markup

from .._amqp import headers as h
from ..crypto.view import shown_body
from ..dlq.message import DeadMessage
from ..dlq.text import body_text, escape, value_text
from .history import Rates, Sample, rates
from .targets import Target

FILTER_FIELDS = ("type", "reason", "since", "until", "grep")
RABBITQ_PREFIX = "rabbitq-"


def shown(value: Any) -> Any:
    """What a template writes for ``value``: strings with their control characters as
    escapes (``\\x1b``), newlines and tabs kept. The templates' ``finalize``, so that it
    holds for every field, whatever a dead letter carries; HTML escaping comes after."""
    if isinstance(value, str) and not value.isprintable():
        text = escape(value, multiline=True)
        return Markup(text) if isinstance(value, Markup) else text
    return value


def when(value: datetime | None) -> str:
    """``2024-05-01 10:00:00Z``, or ``-``."""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ") if value else "-"


def rate_text(value: float | None) -> str:
    """``1.5/s``, ``+0.2/s`` or ``-``."""
    if value is None:
        return "-"
    return f"{value:.1f}/s" if abs(value) >= 0.1 or value == 0 else f"{value * 60:.1f}/min"


@dataclass(frozen=True, kw_only=True)
class QueueRow:
    """One queue on the overview."""

    name: str
    kind: str
    exists: bool
    messages: int | None
    consumers: int | None
    rates: Rates


@dataclass(frozen=True, kw_only=True)
class TargetView:
    """One service on the overview."""

    target: Target
    rows: tuple[QueueRow, ...]
    dlq_depth: int | None


def overview(targets: Sequence[Target], samples: Sequence[Sample]) -> list[TargetView]:
    """Each target's queues with their latest depth, consumers and rates."""
    latest = samples[-1] if samples else None
    out: list[TargetView] = []
    for t in targets:
        rows = []
        for name, kind in t.queues:
            exists = latest is not None and name in latest.depths
            if not exists and not t.exact and kind == "retry":
                continue  # a plain queue name: only the retry queues that exist
            rows.append(
                QueueRow(
                    name=name,
                    kind=kind,
                    exists=exists,
                    messages=latest.depths.get(name) if latest else None,
                    consumers=latest.consumers.get(name) if latest else None,
                    rates=rates(samples, name),
                )
            )
        dlq_depth = latest.depths.get(t.dlq) if latest else None
        out.append(TargetView(target=t, rows=tuple(rows), dlq_depth=dlq_depth))
    return out


def filter_params(query: Mapping[str, str]) -> dict[str, str]:
    """The filter fields of a query string that are set (stripped)."""
    return {k: query[k].strip() for k in FILTER_FIELDS if query.get(k, "").strip()}


def split_list(value: str | None) -> list[str]:
    """``"a, b"`` -> ``["a", "b"]``: a filter field takes several values, as the CLI's
    repeated options do (any of them matches)."""
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def x_death(headers: Mapping[str, Any]) -> list[dict[str, str]]:
    """The broker's dead-lettering history (``x-death``), newest first, as text."""
    return [
        {escape(str(k)): value_text(v) for k, v in death.items()}
        for death in h.broker_deaths(headers)
    ]


def message_sections(m: DeadMessage) -> dict[str, Any]:
    """The message page's content, every string escaped of control characters (the
    template escapes HTML)."""
    kind, text = shown_body(m) or body_text(m.body)
    failure = [
        (k, value_text(v))
        for k, v in sorted(m.headers.items())
        if k.startswith(RABBITQ_PREFIX) and k != h.TRACEBACK
    ]
    others = [
        (escape(k), value_text(v))
        for k, v in sorted(m.headers.items())
        if not k.startswith(RABBITQ_PREFIX) and k != "x-death"
    ]
    props = [(k, value_text(v)) for k, v in sorted(m.properties.items())]
    props.append(("redelivered", str(m.redelivered)))
    return {
        "summary": m.summary(),
        "properties": props,
        "failure": failure,
        "headers": others,
        "deaths": x_death(m.headers),
        "body_kind": kind,
        "body": text,
        "traceback": escape(m.traceback, multiline=True) if m.traceback else None,
        "failed_at": when(m.failed_at),
    }


def described(text: str | None) -> str | None:
    """``text`` with its encrypted parts shown as ``encrypted (key K)`` (the DLQ page's
    error column; the message page decrypts with the app's key ring)."""
    return None if text is None else h.described(text)
