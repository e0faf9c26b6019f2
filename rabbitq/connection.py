"""Opening a robust connection, with errors a person can act on and no password in them."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import aio_pika
import aiormq
from aio_pika.abc import AbstractRobustConnection

from . import wire
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
    wire.install()  # a malformed frame must not drop the connection (see rabbitq.wire)
    options: dict[str, Any] = {}
    if "reconnect_interval" not in urlsplit(url).query:
        options["reconnect_interval"] = RECONNECT_INTERVAL
    try:
        connection: AbstractRobustConnection = await aio_pika.connect_robust(
            url, timeout=timeout, client_properties={"connection_name": name}, **options
        )
    except aiormq.exceptions.ProbableAuthenticationError as exc:
        raise BrokerUnavailable(
            f"RabbitMQ at {redact_url(url)} refused the login: check the user and password"
        ) from exc
    except (TimeoutError, OSError, aiormq.exceptions.AMQPError, ValueError) as exc:
        detail = scrub(str(exc) or type(exc).__name__, url_password(url))
        raise BrokerUnavailable(
            f"cannot reach RabbitMQ at {redact_url(url)} ({detail}); {START_HINT}"
        ) from exc
    return connection
