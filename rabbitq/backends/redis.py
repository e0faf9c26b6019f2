"""``RedisBackend``: every Redis store of an app (idempotency keys, status records,
chord state and results) from one Redis and one key prefix.

The keys are the ones each store makes: ``<key_prefix>idem:``, ``<key_prefix>status:``
(with ``<key_prefix>status-group:`` and ``-callback:``), ``<key_prefix>wf:``
(``rabbitq:...`` by default, as before). redis-py is imported when a store is first
asked for, not here: without the ``redis`` extra the backend says so when it is built.
(Redis has no outbox: an outbox lives in the database whose transaction it joins.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..effects.location import DEFAULT_KEY_BASE, DEFAULT_REDIS_URL, DEFAULT_TIMEOUT, RedisLocation
from ..effects.store import DEFAULT_RETENTION, check_positive
from ..errors import ConfigurationError
from ..settings import redact_url
from .extra import require

if TYPE_CHECKING:
    from ..effects.redisstore import RedisStore
    from ..status.redisstatus import RedisStatus
    from ..workflow.chords_redis import RedisChords


class RedisBackend:
    """The Redis stores of the Redis at ``url``, their keys under ``key_prefix``;
    ``App(backend=RedisBackend(url))`` uses them all.

    ``retention`` (seconds, default 7 days) is how long idempotency keys, status records
    and chord state are kept; ``timeout`` bounds connecting and each round trip. Each
    method answers the same store every time.
    """

    def __init__(
        self,
        url: str = DEFAULT_REDIS_URL,
        *,
        key_prefix: str = DEFAULT_KEY_BASE,
        retention: float = DEFAULT_RETENTION,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        require("redis", ("redis",), "RedisBackend")
        if not key_prefix:
            raise ConfigurationError("key_prefix must not be empty")
        self.location = RedisLocation(
            url,
            key_prefix,
            check_positive("retention", retention),
            check_positive("timeout", timeout),
        )
        self._idempotency: RedisStore | None = None
        self._status: RedisStatus | None = None
        self._chords: RedisChords | None = None

    def __repr__(self) -> str:
        where = self.location
        return f"RedisBackend({redact_url(where.url)!r}, key_prefix={where.base!r})"

    def idempotency(self) -> RedisStore:
        """The idempotency store: ``<key_prefix>idem:<key>``."""
        if self._idempotency is None:
            from ..effects.redisstore import RedisStore

            where = self.location
            self._idempotency = RedisStore(
                where.url,
                key_prefix=where.idempotency_prefix,
                retention=where.retention,
                timeout=where.timeout,
            )
        return self._idempotency

    def status(self) -> RedisStatus:
        """The status store: ``<key_prefix>status:<message_id>``."""
        if self._status is None:
            from ..status.redisstatus import RedisStatus

            where = self.location
            self._status = RedisStatus(
                where.url,
                key_prefix=where.status_prefix,
                retention=where.retention,
                timeout=where.timeout,
            )
        return self._status

    def chords(self) -> RedisChords:
        """The chord store: ``<key_prefix>wf:...`` (the one ``chord_store(self.status())``
        makes)."""
        if self._chords is None:
            from ..workflow.chords_redis import RedisChords

            where = self.location
            self._chords = RedisChords(
                where.url,
                key_prefix=where.chord_prefix,
                retention=where.retention,
                timeout=where.timeout,
            )
        return self._chords
