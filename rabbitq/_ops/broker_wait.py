"""Waiting for the broker at start: ``rabbitq worker --wait-for-broker SECONDS``.

A worker whose broker does not answer exits at once with one line (its supervisor,
a compose ``restart:`` policy or Kubernetes starts it again). Where nothing restarts it
(a compose file started as a whole, the broker still booting), this retries the first
connection until it answers or ``seconds`` run out, saying every few seconds that it
is waiting; then the worker connects as usual.
"""

from __future__ import annotations

import asyncio
import logging

from .._amqp.connection import connect_once
from ..errors import BrokerUnavailable
from ..settings import TLS, redact_url

log = logging.getLogger("rabbitq.worker")

RETRY_EVERY = 1.0  # seconds between attempts
REPORT_EVERY = 5.0  # seconds between the progress lines


async def wait_for_broker(
    url: str,
    *,
    seconds: float,
    tls: TLS | None = None,
    retry_every: float = RETRY_EVERY,
    report_every: float = REPORT_EVERY,
) -> None:
    """Return once the broker at ``url`` accepts a connection (closed again at once);
    raise the last :class:`~rabbitq.errors.BrokerUnavailable` after ``seconds``."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    deadline, next_report = start + seconds, start + report_every
    while True:
        remaining = deadline - loop.time()
        try:
            timeout = max(1.0, min(10.0, remaining))
            connection = await connect_once(url, name="rabbitq wait", tls=tls, timeout=timeout)
        except BrokerUnavailable as exc:
            now = loop.time()
            if now + retry_every > deadline:
                raise BrokerUnavailable(f"{exc} (waited {seconds:g}s: --wait-for-broker)") from exc
            if now >= next_report:
                log.info(
                    "waiting for RabbitMQ at %s (%.0fs of %gs)",
                    redact_url(url),
                    now - start,
                    seconds,
                )
                next_report = now + report_every
            await asyncio.sleep(retry_every)
            continue
        await connection.close()
        if loop.time() - start >= 1.0:
            log.info("RabbitMQ at %s answers after %.0fs", redact_url(url), loop.time() - start)
        return
