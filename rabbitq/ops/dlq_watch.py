"""Watching a worker's DLQ for settings that make the broker drop dead letters.

An operator's policy can expire or push out a DLQ's messages (``message-ttl``,
``max-length`` with ``overflow: drop-head``, ``expires``): the worker dead-letters and
acks, and the broker drops (issue 20: 50 of 50 gone 2 s later). Policies cannot be seen
over AMQP, so :class:`DlqWatch` asks RabbitMQ's management API (``$RABBITQ_MANAGEMENT_URL``,
default ``http://<broker host>:15672``, as the broker URL's user) for the DLQ's arguments
and effective policy once the worker consumes and every :data:`CHECK_INTERVAL` seconds,
and :func:`rabbitq.droprisk.drop_risks` names what drops. A danger is logged at ERROR
when first seen (at start, or when a policy appears), and once more when it is gone;
``rabbitq_dlq_drop_risk{queue}`` counts the settings and ``/readyz`` names them (still
200: the worker itself is fine).

Without the management API (not enabled, not reachable, ``$RABBITQ_MANAGEMENT_URL=off``)
this is said once at INFO and the gauge stays absent: over AMQP rabbitq knows only that
the DLQ's own arguments are the ones it declares (a declare with others fails at start),
and those drop nothing. ``rabbitq doctor`` says the same.
"""

from __future__ import annotations

import asyncio
import logging
import urllib.error
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

from ..droprisk import DropRisk, drop_risks, summary
from ..settings import Settings, redact_url, scrub
from ..worker.lifecycle import Worker
from .doctor_probe import Management
from .metrics import Metrics

log = logging.getLogger("rabbitq.worker")

CHECK_INTERVAL = 60.0
"""Seconds between two looks at the DLQ's policies."""
OFF = "off"
FIX = (
    "rabbitq cannot undo a policy: remove or narrow it, or give it a dead-letter target "
    "(dead-letter-exchange, dead-letter-routing-key) so that what expires is moved, not "
    "dropped (docs/reliability.md, 'A DLQ whose policy drops dead letters')"
)

Report = Callable[[str, "list[DropRisk] | None"], None]


class DlqWatch:
    """Checks ``queue`` through ``management`` and reports each round's risks (None:
    not known) to ``report``."""

    def __init__(
        self, queue: str, management: Management | None, report: Report | None = None
    ) -> None:
        self.queue = queue
        self.management = management
        self.report = report
        self.risks: list[DropRisk] | None = None
        """What the last round found (None: nothing known yet)."""
        self._said_unknown = False

    @classmethod
    def for_worker(cls, worker: Worker, metrics: Metrics | None) -> DlqWatch:
        """The watch of ``worker``'s DLQ, reporting to ``metrics`` (if any)."""
        override = Settings.from_env().management_url
        management = None if override == OFF else Management.for_broker(worker.url, override)
        report = metrics.dlq_checked if metrics is not None else None
        return cls(worker.topology.dlq.name, management, report)

    async def check(self, attempts: int = 5) -> list[DropRisk] | None:
        """One look: the risks, or None if the management API could not tell."""
        if self.management is None:
            self._unknown("$RABBITQ_MANAGEMENT_URL is off")
            return None
        management = self.management
        path = f"queues/{quote(management.vhost, safe='')}/{quote(self.queue, safe='')}"
        try:
            for _ in range(attempts):
                queue: Any = await asyncio.to_thread(management.get, path)
                # a queue declared a moment ago is listed without its policy for a while
                if "effective_policy_definition" in queue:
                    break
                await asyncio.sleep(1)
        except (OSError, ValueError, urllib.error.URLError) as exc:
            why = scrub(str(getattr(exc, "reason", None) or exc), management.password)
            self._unknown(f"the management API at {redact_url(management.base)} did not "
                          f"answer ({why})")  # fmt: skip
            return None
        return drop_risks(
            queue.get("arguments"),
            queue.get("effective_policy_definition"),
            policy=queue.get("policy") or None,
            operator_policy=queue.get("operator_policy") or None,
        )

    def _unknown(self, why: str) -> None:
        if not self._said_unknown:
            log.info(
                "the policies of %s were not checked for settings that drop dead letters: %s "
                "(over AMQP only its arguments are known, and rabbitq's drop nothing; "
                "rabbitq doctor checks them where the API answers)",
                self.queue,
                why,
            )
            self._said_unknown = True

    async def round(self) -> None:
        """Check once; log what changed; report."""
        risks = await self.check()
        if risks is not None and risks != self.risks:
            if risks:
                log.error("danger: %s; %s", summary(self.queue, risks), FIX)
            elif self.risks:
                log.warning("%s no longer drops messages: its policy changed", self.queue)
        if risks is not None:
            self.risks = risks
        if self.report is not None:
            self.report(self.queue, risks)

    async def run(self, ready: asyncio.Event, interval: float = CHECK_INTERVAL) -> None:
        """Once ``ready`` is set (the worker consumes), check every ``interval`` seconds
        until cancelled; a round that fails unexpectedly is logged and the next one runs."""
        await ready.wait()
        while True:
            try:
                await self.round()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("could not check %s for settings that drop messages", self.queue)
            await asyncio.sleep(interval)


async def alongside(main: Awaitable[None], worker: Worker, metrics: Metrics | None) -> None:
    """Await ``main`` (the running worker) with ``worker``'s DLQ watched beside it."""
    watch = DlqWatch.for_worker(worker, metrics)
    task = asyncio.create_task(watch.run(worker.ready), name="rabbitq-dlq-watch")
    try:
        await main
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
