"""The idempotency store protocol: claim a key with a lease, then mark it done or release it.

A key moves through three states, in any store::

    (absent) --claim--> busy (leased to one worker, token T) --done(T)--> done (kept for
    ``retention``) --expiry--> (absent)
                         \\--release(T)/lease expiry--> (absent)

``claim`` answers :data:`NEW` (this worker holds the lease and runs the handler),
:data:`DONE` (a handler with this key succeeded: a duplicate, not run) or :data:`BUSY`
(another worker holds a live lease: not run now, tried again later). ``done`` and
``release`` are compare-and-set on the claim's token, so a worker whose lease expired
and was taken over cannot overwrite the new holder's state.

The decisions are pure functions here; the stores (``postgres.py``, ``redisstore.py``) do
the I/O. A store that cannot be reached raises :class:`StoreUnavailable`: the worker then
counts a failed attempt, it never skips the check.
"""

from __future__ import annotations

import enum
import logging
import math
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from ..errors import ConfigurationError, RabbitqError

log = logging.getLogger("rabbitq.worker")  # closing stores is the worker's last step

DEFAULT_RETENTION = 7 * 24 * 3600.0  # seconds a done key is remembered
# The lease of a handler without a timeout (no bound: the stores' heartbeat keeps its
# claim for as long as it runs), and the margin added to a handler's timeout: the worker
# gives up on the handler at its timeout, then needs a moment to release.
DEFAULT_LEASE = math.inf
LEASE_MARGIN = 5.0


class Status(enum.Enum):
    """What a claim found."""

    NEW = "new"  # this worker holds the lease: run the handler
    DONE = "done"  # a handler with this key succeeded within the retention: a duplicate
    BUSY = "busy"  # another worker holds a live lease: do not run now


NEW, DONE, BUSY = Status.NEW, Status.DONE, Status.BUSY


class StoreUnavailable(RabbitqError):
    """The idempotency store or outbox database could not be reached or failed.

    The delivery's attempt fails (and is retried); its handler does not run unchecked.
    """


class LeaseLost(RabbitqError):
    """The claim's lease expired and another worker took the key over, or it may expire
    (its heartbeat could not renew it in time).

    Raised inside a transactional handler's transaction, so that it rolls back: the
    other worker's effect is the one that counts; and in a handler whose claim may lapse,
    to stop it first (a failed attempt, retried).
    """


@dataclass(slots=True)
class Claim:
    """The answer of :meth:`IdempotencyStore.claim`: the status, and the token that
    proves the lease for :meth:`~IdempotencyStore.done` and :meth:`~IdempotencyStore.release`.
    ``settled`` becomes True once the key was marked done (in the handler's transaction,
    in transactional mode) or released. ``valid_until`` (event loop time) is until when
    the claim is surely held, ``lost`` whether a renewal found it taken over (a store
    with a heartbeat, :mod:`rabbitq.effects.heartbeat`; infinite without one)."""

    key: str
    status: Status
    token: str = field(default_factory=lambda: secrets.token_hex(16))  # 128 random bits
    settled: bool = False
    valid_until: float = math.inf
    lost: bool = False


@runtime_checkable
class IdempotencyStore(Protocol):
    """What the worker needs from a store of handled keys (PostgreSQL, Redis)."""

    retention: float

    async def open(self) -> None:
        """Connect (idempotent); create the schema if the store has one."""

    async def close(self) -> None:
        """Release connections and background tasks."""

    async def claim(self, key: str, *, lease: float) -> Claim:
        """Take ``key`` for at most ``lease`` seconds (infinite for a handler without a
        timeout) unless it is done or leased elsewhere; a store keeps the claim alive
        with a heartbeat (:mod:`rabbitq.effects.heartbeat`), so that it lapses soon
        after its process dies."""
        ...

    async def done(self, claim: Claim) -> bool:
        """Mark the claimed key done for ``retention``; False if the lease was lost."""
        ...

    async def release(self, claim: Claim) -> None:
        """Forget the claimed key (the attempt failed), unless the lease was lost."""


def lease_for(timeout: float | None, default: float = DEFAULT_LEASE) -> float:
    """The longest a claim is held for a handler with ``timeout``: the worker stops the
    handler at its timeout, so a lease a little longer is never outlived by a live
    handler; infinite without a timeout. A store with a heartbeat claims for a short TTL
    within it and renews the claim while its process lives, so that a killed worker frees
    its keys in seconds."""
    return (default if timeout is None else timeout) + LEASE_MARGIN


def check_positive(name: str, value: float) -> float:
    """``value`` if it is a positive number of seconds, else a ConfigurationError."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigurationError(f"{name} must be positive seconds, not {value!r}")
    return float(value)


class Closable(Protocol):
    async def close(self) -> None: ...


async def close_stores(stores: Iterable[Closable | None]) -> None:
    """Close each of ``stores`` once (when the worker stops); None is skipped.

    A store opens its connections on first use and keeps them until closed: left open,
    a Redis or PostgreSQL pool outlives the worker (in a test suite, its sockets are
    reported as unclosed wherever the garbage collector meets them). A closed store
    opens again on its next use. A failure to close is logged: the worker stops anyway.
    """
    for store in {id(s): s for s in stores if s is not None}.values():
        try:
            await store.close()
        except Exception as exc:
            log.warning("could not close %r: %s", store, exc)
