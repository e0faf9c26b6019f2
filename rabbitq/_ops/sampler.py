"""Queue depths for the metrics: a passive declare of each queue every few seconds."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from aio_pika.abc import AbstractRobustConnection

from .._amqp.topology import queue_depths
from .metrics import Metrics

log = logging.getLogger("rabbitq.metrics")

DEFAULT_SAMPLE_INTERVAL = 5.0


async def sample_queues(
    metrics: Metrics,
    connection: Callable[[], AbstractRobustConnection | None],
    specs: Iterable[tuple[str, str]],
    *,
    interval: float = DEFAULT_SAMPLE_INTERVAL,
) -> None:
    """Every ``interval`` seconds, passively declare each ``(queue, kind)`` on the
    connection that ``connection()`` returns and record the depths. Runs until
    cancelled; a round without a usable connection, or that fails, is skipped."""
    specs = list(specs)
    failing = False
    while True:
        conn = connection()
        if conn is not None and not conn.is_closed and conn.connected.is_set():
            try:
                depths = await asyncio.wait_for(queue_depths(conn, specs), timeout=interval)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the connection dropped mid-round: try again later
                if not failing:
                    log.info("could not sample queue depths (%s); will retry", exc or type(exc))
                failing = True
            else:
                metrics.queues_sampled(depths)
                failing = False
        await asyncio.sleep(interval)
