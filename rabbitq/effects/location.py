"""Where a family of stores lives: one database or one Redis, and one naming scheme.

Every PostgreSQL and Redis store of rabbitq (idempotency, status, chords, outbox) keeps
the :class:`PostgresLocation` or :class:`RedisLocation` it was made for as its
``location``. That is how a store of one kind finds its companion of the next kind
(``status_store(idempotency_store)``, ``chord_store(status_store)``): by the type of that
attribute, never by the store's class name, so a subclass or a renamed class still
finds it. The locations are pure data and import no driver.

PostgreSQL: every table is ``<prefix><kind>`` (``rabbitq_idempotency``,
``rabbitq_status``, ``rabbitq_chord_members``..., ``rabbitq_outbox``). Redis: every key
is ``<base><kind>:...`` (``rabbitq:idem:``, ``rabbitq:status:``, ``rabbitq:wf:``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import ConfigurationError
from .store import DEFAULT_RETENTION

DEFAULT_PREFIX = "rabbitq_"
_PREFIX = re.compile(r"^[a-z_][a-z0-9_]{0,40}$")
DEFAULT_TIMEOUT = 5.0
DEFAULT_REDIS_URL = "redis://localhost:6379/0"
DEFAULT_KEY_BASE = "rabbitq:"
IDEMPOTENCY_KEYS = "idem:"
STATUS_KEYS = "status:"
CHORD_KEYS = "wf:"


def check_prefix(prefix: str) -> str:
    """``prefix`` if it makes valid lower-case SQL names, else a ConfigurationError."""
    if not _PREFIX.match(prefix):
        raise ConfigurationError(
            f"table prefix must be lower-case letters, digits and _, not {prefix!r}"
        )
    return prefix


@dataclass(frozen=True, slots=True)
class PostgresLocation:
    """The database at ``dsn`` and the table ``prefix`` its stores share; ``retention``
    (seconds) and ``timeout`` (seconds, connecting and waiting for a connection) are
    the stores' own."""

    dsn: str
    prefix: str = DEFAULT_PREFIX
    retention: float = DEFAULT_RETENTION
    timeout: float = DEFAULT_TIMEOUT


@dataclass(frozen=True, slots=True)
class RedisLocation:
    """The Redis at ``url`` and the ``base`` every key prefix starts with (``rabbitq:``
    gives ``rabbitq:idem:``, ``rabbitq:status:``, ``rabbitq:wf:``)."""

    url: str = DEFAULT_REDIS_URL
    base: str = DEFAULT_KEY_BASE
    retention: float = DEFAULT_RETENTION
    timeout: float = DEFAULT_TIMEOUT

    @property
    def idempotency_prefix(self) -> str:
        """The idempotency keys' prefix (``rabbitq:idem:``)."""
        return self.base + IDEMPOTENCY_KEYS

    @property
    def status_prefix(self) -> str:
        """The status lists' prefix (``rabbitq:status:``)."""
        return self.base + STATUS_KEYS

    @property
    def chord_prefix(self) -> str:
        """The chord state's and results' prefix (``rabbitq:wf:``)."""
        return self.base + CHORD_KEYS

    @classmethod
    def of(
        cls, url: str, key_prefix: str, kind: str, retention: float, timeout: float
    ) -> RedisLocation:
        """The location of a store made with ``key_prefix`` for ``kind`` (one of the
        ``*_KEYS`` above): its base is ``key_prefix`` without that suffix, as the
        companions have always been named (a prefix without it is the base itself)."""
        return cls(url, key_prefix.removesuffix(kind), retention, timeout)
