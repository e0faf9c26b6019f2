"""A large payload's reference on the message (pure): the headers a message whose body
was moved to a blob store carries, and the decisions about them.

The publisher's ``offload`` step moves a body above the store's ``above`` size into the
store and sends the message with an empty body and these headers; the worker's ``fetch``
stage reads them back. Type, message id and routing are untouched, so routing, metrics
and ``dlq list`` work as for any message.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ..errors import ConfigurationError

BLOB = "rabbitq-blob"  # the blob's id in its store
BLOB_SIZE = "rabbitq-blob-size"  # the body's size in bytes
BLOB_SHA256 = "rabbitq-blob-sha256"  # the body's SHA-256, hex: checked when fetched

# How long after a message was due an upload that was never confirmed as sent is kept
# before the sweep deletes it as an orphan (a publisher killed between upload and
# confirm): a message that did reach its queue is fetched (and so kept) well before.
DEFAULT_ORPHAN_AFTER = timedelta(hours=24)
# How long a handled blob's tombstone is kept: a redelivery of a message whose ack was
# lost finds "handled" there, not "missing".
TOMBSTONE_FOR = timedelta(days=1)


@dataclass(frozen=True, slots=True)
class BlobRef:
    """Where a message's body is: ``id`` in the app's blob store, ``size`` bytes with
    digest ``sha256``."""

    id: str
    size: int
    sha256: str

    def headers(self) -> dict[str, Any]:
        return {BLOB: self.id, BLOB_SIZE: self.size, BLOB_SHA256: self.sha256}

    def matches(self, body: bytes) -> bool:
        return len(body) == self.size and hashlib.sha256(body).hexdigest() == self.sha256


def new_ref(body: bytes) -> BlobRef:
    """A reference to ``body`` under a new random id (a republish of the same message
    id uploads again under another id: the first is swept as an orphan)."""
    return BlobRef(uuid.uuid4().hex, len(body), hashlib.sha256(body).hexdigest())


def ref_of(headers: Mapping[str, Any] | None) -> BlobRef | None:
    """The reference a message carries (None: its body is in the message). A header
    of the wrong type (a foreign producer) reads as no reference."""
    if not headers or not isinstance(blob := headers.get(BLOB), str | bytes):
        return None
    size, digest = headers.get(BLOB_SIZE), headers.get(BLOB_SHA256)
    if isinstance(blob, bytes):
        blob = blob.decode("utf-8", "replace")
    if isinstance(digest, bytes):
        digest = digest.decode("ascii", "replace")
    if not isinstance(size, int) or not isinstance(digest, str):
        return None
    return BlobRef(blob, size, digest)


def offloads(size: int, above: int) -> bool:
    """A body of ``size`` bytes goes to the store (strictly above ``above``)."""
    return size > above


def sweep_after(now: datetime, delay: float | timedelta | None, at: datetime | None,
                orphan_after: timedelta) -> datetime:
    """When an upload that was never confirmed as sent becomes an orphan: ``orphan_after``
    after the message was due (a delayed message's blob waits its delay first)."""
    due = now
    if at is not None:
        due = max(now, at)
    elif delay is not None:
        due = now + (delay if isinstance(delay, timedelta) else timedelta(seconds=delay))
    return due + orphan_after


def check_orphan_after(value: float | timedelta | None) -> timedelta:
    """A store's ``orphan_after`` (seconds or a timedelta; None: the default)."""
    if value is None:
        return DEFAULT_ORPHAN_AFTER
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if not (isinstance(seconds, int | float) and seconds >= 0):
        raise ConfigurationError(f"orphan_after must be seconds, not {value!r}")
    return timedelta(seconds=seconds)
