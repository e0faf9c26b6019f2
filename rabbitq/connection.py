"""Opening a robust connection, with errors a person can act on and no password in them."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import aio_pika
import aiormq
from aio_pika.abc import AbstractConnection, AbstractRobustConnection

from .errors import BrokerUnavailable
from .settings import redact_url, scrub, url_password

RECONNECT_INTERVAL = 2.0
START_HINT = "start one with 'rabbitmq-server -detached' or set RABBITQ_URL / --url"


async def connect(url: str, *, name: str, timeout: float = 10.0) -> AbstractRobustConnection:
    """Connect with automatic reconnection; raise :class:`BrokerUnavailable` if we cannot.

    The first connection must succeed: a worker that starts without a broker says so
    and exits rather than waiting silently. Later losses are recovered by aio-pika,
    retrying every ``RECONNECT_INTERVAL`` seconds unless the URL's
    ``?reconnect_interval=`` says otherwise.
    """
    options: dict[str, Any] = {}
    if "reconnect_interval" not in urlsplit(url).query:
        options["reconnect_interval"] = RECONNECT_INTERVAL
    with _actionable_errors(url):
        connection: AbstractRobustConnection = await aio_pika.connect_robust(
            url, timeout=timeout, client_properties={"connection_name": name}, **options
        )
    return connection


async def connect_once(url: str, *, name: str, timeout: float = 10.0) -> AbstractConnection:
    """A connection that does not reconnect, for work that must stop (not resume unseen)
    when the connection drops, such as moving messages out of a DLQ."""
    with _actionable_errors(url):
        connection = await aio_pika.connect(
            url, timeout=timeout, client_properties={"connection_name": name}
        )
    return connection


@contextlib.contextmanager
def _actionable_errors(url: str) -> Iterator[None]:
    try:
        yield
    except aiormq.exceptions.ProbableAuthenticationError as exc:
        raise BrokerUnavailable(
            f"RabbitMQ at {redact_url(url)} refused the login: check the user and password"
        ) from exc
    except (TimeoutError, OSError, aiormq.exceptions.AMQPError, ValueError) as exc:
        detail = scrub(str(exc) or type(exc).__name__, url_password(url))
        raise BrokerUnavailable(
            f"cannot reach RabbitMQ at {redact_url(url)} ({detail}); {START_HINT}"
        ) from exc
