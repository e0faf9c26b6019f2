"""Several broker addresses (the nodes of a cluster): connect to any, and when the node
goes, reconnect to the next.

aio-pika's robust connection reconnects to the one URL it was given. RabbitMQ clients
that know a cluster (the Java client's address list, Bunny's ``hosts:``) instead keep a
list, shuffle it so that a fleet of workers spreads over the nodes, and move to the
next address on each connection attempt. :class:`FailoverConnection` does that on top
of aio-pika's recovery (channels, QoS, declared queues and consumers are restored on
whichever node it reaches): every attempt, the first and each reconnect alike, takes
the next address in the list, so a dead node costs one failed attempt, not a loop.

Everything here works on the list of URLs; ``rabbitq.settings.broker_urls`` splits and
validates the comma-separated form that ``RABBITQ_URL``, ``--url`` and ``App(url=...)``
accept, and ``rabbitq._amqp.connection`` calls :func:`connect_robust` / :func:`connect_first`.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Sequence
from ssl import SSLContext
from typing import Any, TypeVar

from aio_pika import RobustConnection
from aio_pika.connection import make_url

from ..settings import redact_url
from .cancel import cancelled_by_caller

log = logging.getLogger("rabbitq.connection")

T = TypeVar("T")


def connection_order(urls: Sequence[str], rng: random.Random | None = None) -> list[str]:
    """The addresses in the order to try them: shuffled, so that workers spread."""
    order = list(urls)
    (rng or random).shuffle(order)
    return order


class FailoverConnection(RobustConnection):
    """A robust connection that tries its addresses in turn, one per attempt."""

    def __init__(
        self,
        urls: Sequence[str],
        *,
        ssl_context: SSLContext | None = None,
        client_properties: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """``kwargs`` (``heartbeat``, ``reconnect_interval`` ...) go into every URL's
        query, as ``aio_pika.connect_robust`` does with its one URL."""
        if not urls:
            raise ValueError("FailoverConnection needs at least one URL")
        self.urls = tuple(make_url(url, **kwargs) for url in urls)
        self._attempts = 0
        super().__init__(
            self.urls[0], ssl_context=ssl_context, client_properties=client_properties, **kwargs
        )

    @property
    def current_url(self) -> str:
        """The address of the node this connection uses (or tries) now (no options)."""
        return str(self.url.with_query(None))

    # aio-pika's RobustConnection runs every connection attempt (the first one and each
    # reconnect) through its private ``__connect_transport``, which connects to
    # ``self.url``. Overriding it (by its mangled name) is the one place where the
    # address can change between attempts; tests/test_failover.py and the cluster chaos
    # scenario fail if an aio-pika upgrade moves it.
    async def _RobustConnection__connect_transport(self) -> None:
        previous = self.url
        self.url = self.urls[self._attempts % len(self.urls)]
        self._attempts += 1
        if self._attempts > 1 and len(self.urls) > 1:
            log.warning(
                "connecting to %s (after %s)",
                redact_url(str(self.url.with_query(None))),
                redact_url(str(previous.with_query(None))),
            )
        await RobustConnection._RobustConnection__connect_transport(self)  # type: ignore[attr-defined]


async def connect_robust(
    urls: Sequence[str], *, timeout: float, **kwargs: Any
) -> FailoverConnection:
    """A :class:`FailoverConnection` to the first of ``urls`` (in the order given) that
    answers; raise the last error if none does. Later losses move on through the list."""
    last: BaseException | None = None
    for start in range(len(urls)):
        rotated = [*urls[start:], *urls[:start]]
        connection = FailoverConnection(rotated, **kwargs)
        try:
            await connection.connect(timeout=timeout)
        except asyncio.CancelledError as exc:
            # A worker stopped while connecting: a robust connection left open would go
            # on reconnecting and keep the process from exiting.
            await connection.close()
            if cancelled_by_caller():
                raise
            # aiormq cancelled one of its own futures (the connection closed under it):
            # a failed attempt like any other, not a cancellation to pass on.
            last = ConnectionError(f"the connection closed while opening ({exc!r})")
            continue
        except Exception as exc:
            last = exc
            await connection.close()
            if start + 1 < len(urls):
                log.warning("cannot reach %s (%s); trying the next node",
                            redact_url(urls[start]), exc)  # fmt: skip
            continue
        return connection
    assert last is not None
    raise last


async def connect_first(urls: Sequence[str], connect: Callable[[str], Awaitable[T]]) -> T:
    """``await connect(url)`` for each URL in turn until one succeeds; raise the last
    error if none does (for connections that must not reconnect)."""
    last: BaseException | None = None
    for url in urls:
        try:
            return await connect(url)
        except Exception as exc:
            last = exc
    assert last is not None
    raise last
