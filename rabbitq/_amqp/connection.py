"""Opening a robust connection, with errors a person can act on and no password in them."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import aio_pika
import aiormq
from aio_pika.abc import AbstractConnection, AbstractRobustConnection

from ..errors import BrokerUnavailable
from ..settings import (
    TLS,
    broker_urls,
    redact_url,
    resolve_tls,
    scrub,
    ssl_context_for,
    url_password,
)
from . import failover, refusal, wire
from .confirm import retry_waits

RECONNECT_INTERVAL = 2.0
HEARTBEAT = 15
"""Seconds between AMQP heartbeats unless the URL's ``?heartbeat=`` says otherwise: a
connection that stalls without closing (a half-open TCP link) is noticed after about
two missed beats, not the three minutes that the library's default of 60 s would take."""
START_HINT = "start one with 'rabbitmq-server -detached' or set RABBITQ_URL / --url"
TLS_HINT = (
    "check the CA (RABBITQ_TLS_CA / --tls-ca), and the client certificate and key if the "
    "broker requires one (RABBITQ_TLS_CERT, RABBITQ_TLS_KEY / --tls-cert, --tls-key)"
)


def _tls_failure(exc: BaseException) -> ssl.SSLError | None:
    """The TLS error behind a failed connect, if there is one."""
    seen: BaseException | None = exc
    visited: set[int] = set()
    while seen is not None and id(seen) not in visited:  # a chain can loop
        if isinstance(seen, ssl.SSLError):
            return seen
        visited.add(id(seen))
        seen = seen.__cause__ or seen.__context__
    for arg in getattr(exc, "args", ()):
        if isinstance(arg, ssl.SSLError):
            return arg
    return None


async def connect(
    url: str, *, name: str, timeout: float = 10.0, tls: TLS | None = None
) -> AbstractRobustConnection:
    """Connect with automatic reconnection; raise :class:`BrokerUnavailable` if we cannot.

    ``url`` may name several nodes of a cluster, comma-separated: they are tried in a
    shuffled order, and a lost connection moves on to the next (``rabbitq._amqp.failover``).
    The first connection must succeed: a worker that starts without a broker says so
    and exits rather than waiting silently. Later losses are recovered by aio-pika,
    retrying every ``RECONNECT_INTERVAL`` seconds unless the URL's
    ``?reconnect_interval=`` says otherwise; heartbeats every ``HEARTBEAT`` seconds
    unless ``?heartbeat=`` is given. ``amqps://`` URLs use ``tls`` (default:
    the ``$RABBITQ_TLS_*`` files, else the system's CAs).
    """
    options = _options(url, tls)
    if "reconnect_interval" not in urlsplit(url).query:
        options["reconnect_interval"] = RECONNECT_INTERVAL
    with _actionable_errors(url):
        connection: AbstractRobustConnection = await failover.connect_robust(
            failover.connection_order(broker_urls(url)),
            timeout=timeout,
            client_properties={"connection_name": name},
            **options,
        )
    return connection


async def connect_within(
    url: str, retry_for: float | None, *, name: str, tls: TLS | None = None
) -> AbstractRobustConnection:
    """:func:`connect`, tried again with backoff for at most ``retry_for`` seconds (None:
    once) while the broker is unreachable; a refused login is not tried again."""
    if retry_for is None:
        return await connect(url, name=name, tls=tls)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + retry_for
    for wait in retry_waits():
        try:
            return await connect(url, name=name, timeout=max(0.1, deadline - loop.time()), tls=tls)
        except BrokerUnavailable as exc:
            login_refused = isinstance(
                exc.__cause__,
                (
                    aiormq.exceptions.AuthenticationError,
                    aiormq.exceptions.ProbableAuthenticationError,
                ),
            )
            if login_refused or loop.time() + wait >= deadline:
                raise BrokerUnavailable(f"{exc} (gave up after retry_for={retry_for:g}s)") from exc
        await asyncio.sleep(wait)
    raise AssertionError("unreachable")  # retry_waits() never ends


async def connect_once(
    url: str,
    *,
    name: str,
    timeout: float = 10.0,
    tls: TLS | None = None,
    heartbeat: int = HEARTBEAT,
) -> AbstractConnection:
    """A connection that does not reconnect, for work that must stop (not resume unseen)
    when the connection drops, such as moving messages out of a DLQ. ``heartbeat``
    (seconds) unless the URL's ``?heartbeat=`` says otherwise."""
    with _actionable_errors(url):
        options = _options(url, tls, heartbeat)
        connection: AbstractConnection = await failover.connect_first(
            failover.connection_order(broker_urls(url)),
            lambda one: aio_pika.connect(
                one, timeout=timeout, client_properties={"connection_name": name}, **options
            ),
        )
    return connection


def _options(url: str, tls: TLS | None, heartbeat: int = HEARTBEAT) -> dict[str, Any]:
    """Connection options both kinds share: TLS, and the heartbeat unless the URL sets it."""
    wire.install()  # a malformed frame must not drop the connection (see rabbitq._amqp.wire)
    refusal.install()  # a refused vhost says so (see rabbitq._amqp.refusal)
    options: dict[str, Any] = {"ssl_context": ssl_context_for(url, resolve_tls(tls))}
    if "heartbeat" not in urlsplit(url).query:
        options["heartbeat"] = heartbeat
    return options


@contextlib.contextmanager
def _actionable_errors(url: str) -> Iterator[None]:
    try:
        yield
    except aiormq.exceptions.ProbableAuthenticationError as exc:
        raise BrokerUnavailable(
            f"RabbitMQ at {redact_url(url)} refused the login: check the user and password"
        ) from exc
    except (TimeoutError, OSError, aiormq.exceptions.AMQPError, ValueError) as exc:
        if (failure := _tls_failure(exc)) is not None:
            if isinstance(failure, ssl.SSLCertVerificationError):
                reason = f"certificate verify failed: {failure.verify_message}"
            else:
                reason = failure.reason or str(failure)
            raise BrokerUnavailable(
                f"TLS handshake with {redact_url(url)} failed ({reason}): "
                f"{refusal.plain_port_hint(url) or TLS_HINT}"
            ) from exc
        if (refused := refusal.vhost_refusal(url, str(exc))) is not None:
            raise BrokerUnavailable(scrub(refused, url_password(url))) from exc
        detail = scrub(str(exc) or type(exc).__name__, url_password(url))
        hint = TLS_HINT if urlsplit(url).scheme.lower() == "amqps" else START_HINT
        raise BrokerUnavailable(
            f"cannot reach RabbitMQ at {redact_url(url)} ({detail}); {hint}"
        ) from exc
