"""The Redis client of a store: a bounded pool whose callers queue for a connection.

redis-py's default pool refuses the 101st concurrent caller (``Too many connections``);
a store's callers are as many as its process has calls in flight (300 publishes at
once), so each store's client sits on a :class:`~redis.asyncio.BlockingConnectionPool`
of :data:`MAX_CONNECTIONS` instead: a caller beyond them waits for a free connection,
for at most the store's ``timeout``. A client belongs to the event loop it was made on.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

MAX_CONNECTIONS = 50  # per store and event loop; callers beyond them queue


def new_client(
    url: str, *, timeout: float, name: str, max_connections: int = MAX_CONNECTIONS, **options: Any
) -> aioredis.Redis:
    """A client of ``url`` on a pool of its own (closed with the client): ``timeout``
    bounds connecting, each round trip and the wait for a free connection; ``options``
    are redis-py's connection keywords (``retry=``, ``retry_on_error=``)."""
    pool = aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=timeout,  # waiting for a free connection
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        client_name=name,
        **options,
    )
    return aioredis.Redis.from_pool(pool)
