"""Starting against a broker that is not there yet, or goes while we start.

A running worker reconnects for ever (aio-pika's robust connection); a starting one
does the same: :func:`until_started` runs the whole start (connect, open the channels,
declare, consume) again after any failure that the broker or the network caused, a
node killed during ``basic.consume`` or paused during the declare included, logging
each try, until it succeeds, the caller is cancelled (SIGTERM), or ``wait`` seconds
run out. What a person must fix (a refused login or vhost, a failed TLS handshake, a
queue declared with other arguments, a bad URL) is raised at the first try: waiting
would not mend it. :func:`worth_retrying` decides, without I/O.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

import aiormq.exceptions

from ..errors import BrokerUnavailable, ConfigurationError, TopologyMismatch
from ..settings import redact_url
from . import refusal
from .cancel import cancelled_by_caller

log = logging.getLogger("rabbitq.worker")

T = TypeVar("T")

RETRY_EVERY = 2.0
"""Seconds between start attempts (a running worker's reconnect interval)."""

_FINAL = (
    aiormq.exceptions.ProbableAuthenticationError,  # the login
    ssl.SSLError,  # the TLS handshake
    aiormq.exceptions.ChannelPreconditionFailed,  # a queue with other arguments
    aiormq.exceptions.ChannelAccessRefused,  # the user's permissions
    TopologyMismatch,
    ConfigurationError,
)
_TRANSIENT = (
    OSError,  # refused, reset, timed out (TimeoutError), aiormq's connection errors
    aiormq.exceptions.AMQPError,  # a channel or connection closed under us
    aiormq.exceptions.ChannelInvalidStateError,  # "... closed": the node went
    BrokerUnavailable,  # "cannot reach RabbitMQ"
    asyncio.CancelledError,  # a future aiormq cancelled (the caller's is never retried)
)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:  # a chain can loop
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _connection_closed(exc: BaseException) -> bool:
    """aiormq's ``RuntimeError("<Connection: ...> closed")``: a channel asked of a
    connection that went away (not a subclass of anything more telling)."""
    text = str(exc)
    return type(exc) is RuntimeError and text.startswith("<Connection") and text.endswith("closed")


def worth_retrying(exc: BaseException) -> bool:
    """Whether a start that failed with ``exc`` should be tried again (pure): the
    broker or the network failed, and nothing in the error's chain is for a person
    to fix."""
    chain = list(_chain(exc))
    if any(isinstance(e, _FINAL) for e in chain):
        return False
    if any(refusal.vhost_refusal("amqp:///", str(e)) is not None for e in chain):
        return False  # a vhost that does not exist or may not be used
    return isinstance(exc, _TRANSIENT) or _connection_closed(exc)


def describe(exc: BaseException) -> str:
    """One line for a failed attempt."""
    return str(exc) or type(exc).__name__


async def until_started(
    attempt: Callable[[], Awaitable[T]],
    *,
    url: str,
    wait: float | None = None,
    retry_every: float = RETRY_EVERY,
    clean_up: Callable[[], Awaitable[None]] | None = None,
) -> T:
    """``await attempt()`` until it succeeds; after a failure worth retrying, await
    ``clean_up()`` (what the attempt left open), log the try and try again after
    ``retry_every`` seconds, for ever (``wait`` None) or for ``wait`` seconds (then
    raise :class:`BrokerUnavailable` naming the wait; 0: one attempt, its own error).
    Other errors, and the caller's cancellation, are raised at once."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    tries = 0
    while True:
        tries += 1
        try:
            result = await attempt()
        except BaseException as exc:
            if clean_up is not None:
                await clean_up()
            if isinstance(exc, asyncio.CancelledError) and cancelled_by_caller():
                raise
            if not worth_retrying(exc):
                raise
            waited = loop.time() - start
            if wait is not None and waited + retry_every > wait:
                if wait == 0:
                    raise
                raise BrokerUnavailable(
                    f"{describe(exc)} (waited {wait:g}s: --wait-for-broker)"
                ) from exc
            log.warning(
                "waiting for RabbitMQ at %s (try %d failed after %.0fs: %s); trying again in %gs",
                redact_url(url),
                tries,
                waited,
                describe(exc),
                retry_every,
            )
            await asyncio.sleep(retry_every)
            continue
        if tries > 1:
            log.info(
                "RabbitMQ at %s answers after %.0fs (%d tries)",
                redact_url(url),
                loop.time() - start,
                tries,
            )
        return result
