"""Watching a worker's queues for what the broker does to messages out of AMQP's sight.

Two things rabbitq cannot see over AMQP, asked of RabbitMQ's management API
(``$RABBITQ_MANAGEMENT_URL``, default ``http://<broker host>:15672``, as the broker URL's
user) once the worker consumes, every :data:`CHECK_INTERVAL` seconds, and shortly after
the worker declared its queues again:

- **A DLQ that drops dead letters.** An operator's policy can expire or push out a DLQ's
  messages (``message-ttl``, ``max-length`` with ``overflow: drop-head``, ``expires``):
  the worker dead-letters and acks, the broker drops (issue 20: 50 of 50 gone 2 s
  later). :func:`rabbitq._amqp.droprisk.drop_risks` names each such setting: logged at ERROR
  when first seen (at start, or when a policy appears) and once more when gone,
  ``rabbitq_dlq_drop_risk{queue}``, and ``/readyz`` (still 200: the worker is fine).
- **Dead letters the broker holds.** A quorum queue dead-letters at-least-once: what it
  could not hand on (a retry whose delay ran out while the main queue was missing, e.g.
  in the worker's re-declare wait after someone deleted it) stays in the queue, counted
  by ``messages`` but neither ready nor unacked, and is sent again only on the
  dead-letter process's timer, about 3 minutes later (measured on 3.10.8). Every AMQP
  depth says 0 meanwhile; ``rabbitq_dead_letters_held_by_broker{queue}`` and a warning
  say how many.
  The quorum delay ladder's levels (shared by the vhost's apps) are watched too: a
  level that sent its expired messages on while their next hop was down (a broker
  restart) or missing holds them until that timer runs out, about 25 per cycle
  (docs/delays.md, "Restarts"): delayed messages late by one or more cycles.

Without the management API (not enabled, not reachable, ``$RABBITQ_MANAGEMENT_URL=off``)
this is said once in one short line with the fix (INFO; DEBUG when turned off) and the
gauges stay absent: over AMQP rabbitq knows only that the DLQ's own arguments are the
ones it declares (a declare with others fails at start), and those drop nothing.
``rabbitq doctor`` checks the same where the API answers.
"""

from __future__ import annotations

import asyncio
import logging
import urllib.error
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import quote

from .._amqp.droprisk import DropRisk, drop_risks, summary
from .._amqp.topology import Topology
from .._worker.partitioned import AnyWorker
from ..ladder.plan import levels_pattern
from ..settings import Settings, redact_url, scrub
from .doctor_probe import Management
from .metrics import Metrics

log = logging.getLogger("rabbitq.worker")

CHECK_INTERVAL = 60.0
"""Seconds between two looks at the queues."""
LOOK_AFTER_REDECLARE = 6.0
"""Seconds after the worker declared its queues again before an extra look: the
management API's statistics (every 5 s by default) must have seen the held messages."""
OFF = "off"
HELD = (
    "RabbitMQ holds %s dead letter(s) of %s that it could not hand to %s (the queue was "
    "missing when they were dead-lettered: deleted, not declared again yet). Nothing is "
    "lost: quorum queues dead-letter at-least-once and send them again on their own timer "
    "(dead_letter_worker_publisher_confirm_timeout, 3 minutes by default; any policy change "
    "on the queue sends them at once). Counted by rabbitq_dead_letters_held_by_broker"
)
LADDER_HELD = (
    "RabbitMQ holds %s delayed message(s) in the delay ladder's level %s: their next hop "
    "(a lower level or an app's queue) did not confirm them. Nothing is lost. If that "
    "queue is missing (deleted, where rabbitq.delay.deliver lacks its alternate exchange: "
    "rabbitq doctor), declare it again (a worker, rabbitq topology) and any "
    "policy change on the level sends them at once; if it was down (a broker restart), "
    "RabbitMQ sends them again, about 25 per cycle, each time its dead-letter timer runs "
    "out (dead_letter_worker_publisher_confirm_timeout, 3 minutes by default: lower it, "
    "docs/delays.md). Counted by rabbitq_dead_letters_held_by_broker"
)
LADDER_PAGE = 100
"""Queues asked for in the one listing of the ladder's levels (25 per queue type)."""
FIX = (
    "rabbitq cannot undo a policy: remove or narrow it, or give it a dead-letter target "
    "(dead-letter-exchange, dead-letter-routing-key) so that what expires is moved, not "
    "dropped (docs/reliability.md, 'A DLQ whose policy drops dead letters')"
)

class QueueWatch:
    """Checks ``topology``'s queues through ``management`` and reports to ``metrics``."""

    def __init__(
        self,
        topology: Topology,
        management: Management | None,
        metrics: Metrics | None = None,
        redeclared: Callable[[], int] = lambda: 0,
    ) -> None:
        self.dlq = topology.dlq.name
        self.targets = {topology.main.name: topology.dlq.name}
        self.targets |= {spec.name: topology.main.name for spec in topology.retries}
        ladder = topology.ladder
        self.ladder = (
            frozenset(level.name for level in ladder.levels)
            if ladder.queue_type == "quorum"  # classic levels dead-letter at most once
            else frozenset()
        )
        """The quorum ladder's levels: a level's held messages are reported once seen."""
        self._ladder_pattern = levels_pattern(ladder.queue_type)
        self.management = management
        self.metrics = metrics
        self.redeclared = redeclared
        """How often the worker declared its queues again (a look follows each change)."""
        self.risks: list[DropRisk] | None = None
        """What the last round found on the DLQ (None: nothing known yet)."""
        self.held: dict[str, int] = {}
        """Dead letters each of the main and retry queues holds (last round)."""
        self._said_unknown = False
        self._said_ladder = False

    @classmethod
    def for_worker(cls, worker: AnyWorker, metrics: Metrics | None) -> QueueWatch:
        """The watch of ``worker``'s queues, reporting to ``metrics`` (if any)."""
        override = Settings.from_env().management_url
        management = None if override == OFF else Management.for_broker(worker.url, override)
        return cls(worker.topology, management, metrics, lambda: worker.keeper.redeclared)

    async def _get(self, name: str, attempts: int = 5) -> Any:
        """The management API's view of queue ``name`` ({} if it does not exist)."""
        assert self.management is not None
        management = self.management
        path = f"queues/{quote(management.vhost, safe='')}/{quote(name, safe='')}"
        queue: Any = {}
        for _ in range(attempts):
            try:
                queue = await asyncio.to_thread(management.get, path)
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    return {}
                raise
            # a queue declared a moment ago is listed without its policy for a while
            if "effective_policy_definition" in queue:
                break
            await asyncio.sleep(1)
        return queue

    async def _ladder_held(self) -> dict[str, int]:
        """What each ladder level holds, in one listing, for the levels that hold some
        now or held some at the last look (so that their gauge goes back to 0)."""
        if not self.ladder:
            return {}
        assert self.management is not None
        columns = "name,messages,messages_ready,messages_unacknowledged"
        path = (
            f"queues/{quote(self.management.vhost, safe='')}?page=1&page_size={LADDER_PAGE}"
            f"&use_regex=true&name={quote(self._ladder_pattern, safe='')}&columns={columns}"
        )
        try:
            listing = await asyncio.to_thread(self.management.get, path)
        except (OSError, ValueError, urllib.error.URLError) as exc:  # the app's own go on
            if not self._said_ladder:
                why = scrub(str(getattr(exc, "reason", None) or exc), self.management.password)
                log.info("the delay ladder's levels were not checked for held messages: %s", why)
                self._said_ladder = True
            return {}
        items = listing.get("items", []) if isinstance(listing, dict) else listing
        now = {
            q["name"]: held_by_broker(q)
            for q in items
            if isinstance(q, dict) and q.get("name") in self.ladder
        }
        return {
            name: now.get(name, 0)
            for name in self.ladder
            if now.get(name, 0) or self.held.get(name, 0)
        }

    async def check(self) -> tuple[list[DropRisk], dict[str, int]] | None:
        """One look: the DLQ's drop risks and the dead letters each other queue holds;
        None if the management API could not tell."""
        if self.management is None:
            self._unknown(None)
            return None
        try:
            dlq = await self._get(self.dlq)
            held = {name: held_by_broker(await self._get(name)) for name in self.targets}
            held |= await self._ladder_held()
        except (OSError, ValueError, urllib.error.URLError) as exc:
            self._unknown(exc)
            return None
        risks = drop_risks(
            dlq.get("arguments"),
            dlq.get("effective_policy_definition"),
            policy=dlq.get("policy") or None,
            operator_policy=dlq.get("operator_policy") or None,
        )
        return risks, held

    def _unknown(self, exc: Exception | None) -> None:
        """Once, one short line: what is missing and the fix (INFO; DEBUG when turned
        off). Over AMQP only the DLQ's arguments are known, and rabbitq's drop nothing."""
        if self._said_unknown:
            return
        self._said_unknown = True
        if self.management is None:
            log.debug("DLQ policies not checked: RABBITQ_MANAGEMENT_URL=off")
            return
        where = redact_url(self.management.base)
        if isinstance(exc, urllib.error.HTTPError):
            text = f"the management API at {where} answered HTTP {exc.code}; give the user "
            text += "the management tag"
        else:
            reason = getattr(exc, "reason", None) or exc
            why = reason.strerror if isinstance(reason, OSError) and reason.strerror else reason
            text = f"no management API at {where} ({why}); enable rabbitmq_management"
        log.info("DLQ policies not checked: %s", scrub(text, self.management.password))

    async def round(self) -> None:
        """Check once; log what changed; report to the metrics."""
        found = await self.check()
        if found is None:
            return
        risks, held = found
        if risks != self.risks:
            if risks:
                log.error("danger: %s; %s", summary(self.dlq, risks), FIX)
            elif self.risks:
                log.warning("%s no longer drops messages: its policy changed", self.dlq)
        for name, count in held.items():
            before = self.held.get(name, 0)
            if count and not before:
                if name in self.ladder:
                    log.warning(LADDER_HELD, count, name)
                else:
                    log.warning(HELD, count, name, self.targets[name])
            elif before and not count:
                log.info("%s handed on the dead letters it held", name)
        self.risks, self.held = risks, held
        if self.metrics is not None:
            self.metrics.dlq_checked(self.dlq, risks)
            for name, count in held.items():
                self.metrics.held_by_broker(name, count)

    async def run(
        self,
        ready: asyncio.Event,
        interval: float = CHECK_INTERVAL,
        look_after: float = LOOK_AFTER_REDECLARE,
    ) -> None:
        """Once ``ready`` is set (the worker consumes), check every ``interval`` seconds,
        and ``look_after`` seconds after the worker declared its queues again (a queue
        was deleted: retries may be held), until cancelled; a round that fails
        unexpectedly is logged and the next one runs."""
        await ready.wait()
        while True:
            try:
                await self.round()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("could not check the queues of %s", self.dlq)
            seen, waited = self.redeclared(), 0.0
            while waited < interval and self.redeclared() == seen:
                await asyncio.sleep(min(1.0, interval))
                waited += min(1.0, interval)
            if self.redeclared() != seen:
                await asyncio.sleep(look_after)


def held_by_broker(queue: Mapping[str, Any]) -> int:
    """Messages a queue counts but neither offers nor has out (``messages`` minus ready
    and unacked): on a quorum queue, dead letters its at-least-once dead-letter process
    has not handed on yet."""
    counts = [queue.get(k) for k in ("messages", "messages_ready", "messages_unacknowledged")]
    numbers = [c for c in counts if isinstance(c, int)]
    if len(numbers) != 3:
        return 0  # statistics not collected yet
    total, ready, unacked = numbers
    return max(0, total - ready - unacked)


async def alongside(
    main: Callable[[], Awaitable[None]], worker: AnyWorker, metrics: Metrics | None
) -> None:
    """Await ``main()`` (the running worker) with ``worker``'s queues watched beside it."""
    watch = QueueWatch.for_worker(worker, metrics)
    task = asyncio.create_task(watch.run(worker.ready), name="rabbitq-queue-watch")
    try:
        await main()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
