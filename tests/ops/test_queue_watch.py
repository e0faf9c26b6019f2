"""The queue watch's rounds against a stand-in management API (no broker): what it logs
once, what it reports, and what it says when it cannot ask."""

from __future__ import annotations

import logging
import urllib.error
from typing import Any

from prometheus_client import CollectorRegistry

from rabbitq import App, Message, Metrics, RetryPolicy
from rabbitq._ops.queue_watch import QueueWatch, held_by_broker


class Ping(Message, type="test.watch.ping"):
    n: int


APP = App(queue="watched", retry=RetryPolicy(delays=(1,)))
APP.handler(Ping)(lambda m: None)
TOPOLOGY = APP.topology()
DLQ, RETRY = TOPOLOGY.dlq.name, TOPOLOGY.retries[0].name
LEVEL = TOPOLOGY.ladder.levels[2].name


class StandIn:
    """Answers as the management API would for each queue; ``down``: refuses."""

    vhost, base, password = "/", "http://rabbit:15672", "secret"

    def __init__(self) -> None:
        self.policy: dict[str, Any] = {}
        self.held = 0
        self.ladder_held = 0
        self.down = False
        self.listings: list[str] = []

    def get(self, path: str) -> dict[str, Any]:
        if self.down:
            raise urllib.error.URLError("connection refused")
        if "?" in path:  # one page listing the ladder's levels
            self.listings.append(path)
            level = {"name": LEVEL, "messages": self.ladder_held, "messages_ready": 0,
                     "messages_unacknowledged": 0}  # fmt: skip
            return {"items": [{"name": "other", "messages": 5}, level]}
        name = path.rsplit("/", 1)[1].replace("%2F", "/")
        held = self.held if name == RETRY else 0
        policy = self.policy if name == DLQ else {}
        return {"name": name, "arguments": {}, "effective_policy_definition": policy,
                "operator_policy": "ops" if policy else None, "messages": held,
                "messages_ready": 0, "messages_unacknowledged": 0}  # fmt: skip


async def test_a_drop_risk_and_held_dead_letters_are_logged_once_and_reported(caplog):
    caplog.set_level(logging.INFO, logger="rabbitq.worker")
    api, metrics = StandIn(), Metrics(CollectorRegistry())
    watch = QueueWatch(TOPOLOGY, api, metrics)  # type: ignore[arg-type]
    api.policy, api.held = {"message-ttl": 2000}, 7
    await watch.round()
    await watch.round()
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and errors[0].startswith(f"danger: {DLQ} drops messages: message-ttl")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [warnings[0]] and warnings[0].startswith("RabbitMQ holds 7 dead letter")
    value = metrics.registry.get_sample_value
    assert value("rabbitq_dlq_drop_risk", {"queue": DLQ}) == 1
    assert value("rabbitq_dead_letters_held_by_broker", {"queue": RETRY}) == 7
    api.policy, api.held = {}, 0
    await watch.round()
    assert value("rabbitq_dlq_drop_risk", {"queue": DLQ}) == 0
    assert value("rabbitq_dead_letters_held_by_broker", {"queue": RETRY}) == 0
    said = [r.getMessage() for r in caplog.records]
    assert f"{DLQ} no longer drops messages: its policy changed" in said
    assert f"{RETRY} handed on the dead letters it held" in said


async def test_without_the_api_it_says_so_once_and_reports_nothing(caplog):
    caplog.set_level(logging.INFO, logger="rabbitq.worker")
    api, metrics = StandIn(), Metrics(CollectorRegistry())
    api.down = True
    watch = QueueWatch(TOPOLOGY, api, metrics)  # type: ignore[arg-type]
    await watch.round()
    await watch.round()
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "DLQ policies not checked" in said[0], said
    assert "connection refused" in said[0].lower() and len(said[0]) < 120, said
    assert "secret" not in said[0]
    assert metrics.registry.get_sample_value("rabbitq_dlq_drop_risk", {"queue": DLQ}) is None
    off = QueueWatch(TOPOLOGY, None, metrics)
    assert await off.check() is None


def test_held_dead_letters_are_messages_neither_ready_nor_unacked():
    counts = {"messages": 30, "messages_ready": 2, "messages_unacknowledged": 3}
    assert held_by_broker(counts) == 25
    assert held_by_broker({"messages": 30}) == 0  # statistics not collected yet


async def test_a_redeclare_brings_the_next_look_forward():
    import asyncio

    api, redeclared = StandIn(), [0]
    watch = QueueWatch(TOPOLOGY, api, None, lambda: redeclared[0])  # type: ignore[arg-type]
    rounds: list[int] = []
    look = watch.round

    async def counted() -> None:
        rounds.append(1)
        await look()

    watch.round = counted  # type: ignore[method-assign]
    ready = asyncio.Event()
    ready.set()
    task = asyncio.create_task(watch.run(ready, interval=3600, look_after=0.1))
    await asyncio.sleep(0.2)
    assert len(rounds) == 1  # at start; the next would be an hour away
    redeclared[0] += 1  # a queue was deleted and declared again
    await asyncio.sleep(1.5)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert len(rounds) == 2


async def test_a_ladder_level_that_holds_delayed_messages_is_reported_once_seen(caplog):
    caplog.set_level(logging.INFO, logger="rabbitq.worker")
    api, metrics = StandIn(), Metrics(CollectorRegistry())
    watch = QueueWatch(TOPOLOGY, api, metrics)  # type: ignore[arg-type]
    value = metrics.registry.get_sample_value
    await watch.round()
    assert value("rabbitq_dead_letters_held_by_broker", {"queue": LEVEL}) is None  # no series yet
    assert len(api.listings) == 1 and "use_regex=true" in api.listings[0]  # one request a round
    api.ladder_held = 12
    await watch.round()
    await watch.round()
    assert value("rabbitq_dead_letters_held_by_broker", {"queue": LEVEL}) == 12
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        f"RabbitMQ holds 12 delayed message(s) in the delay ladder's level {LEVEL}"
        + warnings[0].split(LEVEL, 1)[1]
    ]
    assert "dead_letter_worker_publisher_confirm_timeout" in warnings[0]
    api.ladder_held = 0
    await watch.round()
    assert value("rabbitq_dead_letters_held_by_broker", {"queue": LEVEL}) == 0
    assert f"{LEVEL} handed on the dead letters it held" in [r.getMessage() for r in caplog.records]


def test_a_classic_ladder_is_not_watched():
    app = App(queue="classic.watched", queue_type="classic")
    app.handler(Ping)(lambda m: None)
    assert QueueWatch(app.topology(), None).ladder == frozenset()


async def test_a_ladder_listing_the_api_refuses_leaves_the_app_s_own_checks_going(caplog):
    caplog.set_level(logging.INFO, logger="rabbitq.worker")

    class NoListing(StandIn):
        def get(self, path: str) -> dict[str, Any]:
            if "?" in path:
                raise urllib.error.HTTPError(path, 400, "Bad Request", None, None)  # type: ignore[arg-type]
            return super().get(path)

    api, metrics = NoListing(), Metrics(CollectorRegistry())
    api.held = 3
    watch = QueueWatch(TOPOLOGY, api, metrics)  # type: ignore[arg-type]
    await watch.round()
    await watch.round()
    assert metrics.registry.get_sample_value(
        "rabbitq_dead_letters_held_by_broker", {"queue": RETRY}
    ) == 3
    said = [r.getMessage() for r in caplog.records if "ladder" in r.getMessage()]
    assert len(said) == 1 and "Bad Request" in said[0]
