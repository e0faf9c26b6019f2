"""What a blob store is (:class:`BlobStore`) and what it answers (pure).

A blob goes through three states: ``pending`` (uploaded by a publisher, not yet known
to be in the broker), ``sent`` (its message was confirmed, or reached a worker), and
``done`` (its message was handled: the data is gone, a tombstone stays for
:data:`~rabbitq.payloads.reference.TOMBSTONE_FOR`, so that a redelivery whose ack was
lost reads "handled", not "missing"). The sweep deletes pending blobs past their
``sweep_after`` (orphans: the publisher died between upload and confirm, or its publish
ended without one; a publisher waiting for the confirm keeps pushing ``sweep_after``
forward: :mod:`rabbitq.payloads.lease`) and expired tombstones. A DLQ purge deletes its
messages' blobs outright.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol

from .reference import BlobRef

State = Literal["pending", "sent", "done"]


@dataclass(frozen=True, slots=True)
class Found:
    """A blob as the store has it: its ``state`` and, unless done, its ``data``."""

    state: State
    data: bytes | None


@dataclass(frozen=True, slots=True)
class Swept:
    """What one sweep deleted."""

    orphans: int
    tombstones: int


class BlobStore(Protocol):
    """Where large payloads live (:class:`~rabbitq.payloads.PostgresBlobs`,
    :class:`~rabbitq.payloads.S3Blobs`). ``above``: bodies larger than this many bytes
    are moved there."""

    above: int

    async def put(self, ref: BlobRef, data: bytes, sweep_after: datetime) -> None:
        """Store ``data`` as ``ref.id``, pending."""
        ...

    async def renew(self, blob_id: str, sweep_after: datetime) -> None:
        """Its publish still waits for the broker's confirm: a pending blob is not swept
        before ``sweep_after`` (never moved earlier; :mod:`rabbitq.payloads.lease`)."""
        ...

    async def sent(self, blob_id: str) -> None:
        """Its message is in the broker: no longer an orphan candidate."""
        ...

    async def get(self, blob_id: str) -> Found | None:
        """The blob (None: the store has no trace of it)."""
        ...

    async def done(self, blob_id: str) -> None:
        """Its message was handled: drop the data, keep a tombstone."""
        ...

    async def delete(self, blob_ids: list[str]) -> int:
        """Delete these blobs outright (a DLQ purge); how many there were."""
        ...

    async def sweep(self) -> Swept:
        """Delete orphans past their ``sweep_after`` and expired tombstones."""
        ...

    async def close(self) -> None:
        """Release connections (idempotent)."""
        ...
