"""Serving the console: uvicorn, stopped by SIGTERM/SIGINT as a worker is (a log line,
exit 0), and the broker checked once at start so that a refused login is one line.

uvicorn re-raises the signal it stopped on once it has shut down, so that the process
dies of it (exit 143 on SIGTERM, with nothing said); the console's server logs the
signal and returns instead.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from types import FrameType

import aiormq
import uvicorn

from .._amqp.connection import connect_once
from ..errors import BrokerUnavailable

log = logging.getLogger("rabbitq.console")


class ConsoleServer(uvicorn.Server):
    """A uvicorn server that logs the signal that stops it and exits 0."""

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if not self.should_exit:
            log.info("%s received: stopping the console", signal.Signals(sig).name)
        super().handle_exit(sig, frame)
        captured = getattr(self, "_captured_signals", None)
        if isinstance(captured, list):
            captured.clear()  # stopped cleanly: not re-raised after shutdown


def refused(exc: BrokerUnavailable) -> bool:
    """Whether the broker answered and refused (the login, the vhost): waiting cannot
    fix that, unlike a broker that is down (pure)."""
    cause = exc.__cause__
    return isinstance(cause, aiormq.exceptions.ProbableAuthenticationError) or (
        " refused vhost " in str(exc)
    )


async def check_broker(url: str) -> None:
    """Connect once: a refusal raises :class:`BrokerUnavailable` (the command stops with
    its one line); a broker that cannot be reached is logged in one line and left to the
    sampler, which shows it on the page and tries again."""
    try:
        connection = await connect_once(url, name="rabbitq console", timeout=5.0)
    except BrokerUnavailable as exc:
        if refused(exc):
            raise
        log.warning("%s (the console shows it and tries again)", exc)
        return
    await connection.close()


def check_broker_sync(url: str) -> None:
    """:func:`check_broker`, from the command (no loop running yet)."""
    asyncio.run(check_broker(url))
