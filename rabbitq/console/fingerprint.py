"""Failure fingerprints and groups (pure): which dead messages failed the same way.

A fingerprint is the exception type plus the error text with whatever changes from one
message to the next (ids, numbers, quoted values) replaced by placeholders, so that
``KeyError: 'user 4711'`` and ``KeyError: 'user 4712'`` fall into one group.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from .._amqp import headers as h
from ..dlq.message import DeadMessage

# Order matters: the specific shapes first, bare numbers last.
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(
            r"\b[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}\b"
        ),
        "<uuid>",
    ),
    (re.compile(r"\b\d{4}-\d{2}-\d{2}[T ][\d:.]+(?:Z|[+-]\d{2}:?\d{2})?"), "<time>"),
    (re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b"), "<email>"),
    (re.compile(r"\b0x[0-9a-fA-F]+\b"), "<hex>"),
    # A hex run with at least one digit and one letter (hashes, object ids).
    (re.compile(r"\b(?=[0-9a-fA-F]*\d)(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{8,}\b"), "<hex>"),
    (re.compile(r"-?\d+(?:\.\d+)?"), "<n>"),
)
_SPACES = re.compile(r"\s+")
MAX_TEXT = 200
NO_ERROR = "(no error recorded)"


def split_error(error: str | None) -> tuple[str, str]:
    """``("ValueError", "bad amount 12")`` from ``ValueError: bad amount 12``; the type is
    empty when the text does not start with one."""
    if not error:
        return "", ""
    head, sep, rest = error.partition(":")
    if sep and head and " " not in head.strip() and head.strip().replace(".", "").isidentifier():
        return head.strip(), rest.strip()
    return "", error.strip()


def normalise(text: str) -> str:
    """The error text with ids, numbers, times and addresses replaced by placeholders."""
    for pattern, placeholder in _PATTERNS:
        text = pattern.sub(placeholder, text)
    return _SPACES.sub(" ", text).strip()[:MAX_TEXT]


def fingerprint(error: str | None) -> tuple[str, str]:
    """``(id, label)``: a short stable id and the readable normalised form
    (``ValueError: bad amount <n>``) of an error text; an encrypted app's error is
    grouped by its type and key (``ValueError: encrypted (key k2)``)."""
    kind, text = split_error(None if error is None else h.described(error))
    label = f"{kind}: {normalise(text)}" if kind else (normalise(text) or NO_ERROR)
    digest = hashlib.sha256(label.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return digest, label


@dataclass(kw_only=True)
class FailureGroup:
    """Messages with one reason and one fingerprint."""

    id: str
    reason: str
    label: str
    keys: list[str] = field(default_factory=list)
    first: datetime | None = None
    last: datetime | None = None
    sample: DeadMessage | None = None

    @property
    def count(self) -> int:
        """How many messages the group holds."""
        return len(self.keys)

    def add(self, m: DeadMessage) -> None:
        """Count ``m`` in; the first message with a traceback is the sample."""
        self.keys.append(m.key)
        when = m.failed_at
        if when is not None:
            self.first = when if self.first is None else min(self.first, when)
            self.last = when if self.last is None else max(self.last, when)
        if self.sample is None or (self.sample.traceback is None and m.traceback):
            self.sample = m


def group_messages(messages: Iterable[DeadMessage]) -> list[FailureGroup]:
    """Groups by (reason, fingerprint), largest first (ties: most recent failure first)."""
    groups: dict[str, FailureGroup] = {}
    for m in messages:
        reason = m.reason or "-"
        digest, label = fingerprint(m.error)
        gid = hashlib.sha256(f"{reason}\n{digest}".encode()).hexdigest()[:12]
        group = groups.get(gid)
        if group is None:
            group = groups[gid] = FailureGroup(id=gid, reason=reason, label=label)
        group.add(m)
    return sorted(
        groups.values(),
        key=lambda g: (-g.count, -(g.last.timestamp() if g.last else 0.0), g.label),
    )


def reason_counts(groups: Iterable[FailureGroup]) -> list[tuple[str, int]]:
    """Messages per reason, most first."""
    counts: dict[str, int] = {}
    for g in groups:
        counts[g.reason] = counts.get(g.reason, 0) + g.count
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))
