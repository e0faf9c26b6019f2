"""One backend per store kind (docs/effects.md, "One backend"): a
:class:`PostgresBackend` or :class:`RedisBackend` hands out an app's idempotency
store, status store and chord store (and, for PostgreSQL, its outbox) from one
connection setting and one prefix; ``App(backend=...)`` takes one.

- :mod:`.postgres`, :mod:`.redis`: the two backends;
- :mod:`.defaults`: what ``App(backend=...)`` takes from one (explicit stores win);
- :mod:`.extra`: the check of their driver, with the ``pip install`` hint.

Neither imports its driver until a store is asked for; each store keeps the
:mod:`~rabbitq.effects.location` it was made for, which is how it finds its companions.
"""

from __future__ import annotations

from .defaults import Backend
from .postgres import PostgresBackend
from .redis import RedisBackend

__all__ = ["Backend", "PostgresBackend", "RedisBackend"]
