"""Cancel without a broker: the report per message (pure), the stage over a fake store
(acked unrun, ctx.cancelled within a poll, a store that cannot be read holds the
message), and ``rabbitq.testing``'s ``deliver(..., cancelled=...)``."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest

from rabbitq import App, Context, Message
from rabbitq.cancellation import model
from rabbitq.cancellation.stage import CancelStage
from rabbitq.effects.store import StoreUnavailable
from rabbitq.errors import ConfigurationError
from rabbitq.job import add_stage
from rabbitq.outcome import Retry
from rabbitq.status.model import Record, fold
from rabbitq.testing import deliver


class Capture(Message, type="test.cancel.capture"):
    order: str


class FakeStore:
    def __init__(self) -> None:
        self.ids: set[str] = set()
        self.down = False
        self.lookups: list[list[str]] = []

    async def add(self, message_ids: Sequence[str]) -> None:
        self.ids.update(message_ids)

    async def which(self, message_ids: Sequence[str]) -> set[str]:
        self.lookups.append(list(message_ids))
        if self.down:
            raise StoreUnavailable("down")
        return self.ids & set(message_ids)

    async def durable(self) -> bool | None:
        return False

    async def close(self) -> None:
        pass


def app_with(store: FakeStore, ran: list[str], *, poll: float = 0.05) -> App:
    app = App(queue="cancel-units")

    @app.handler(Capture)
    async def capture(msg: Capture, ctx: Context) -> None:
        ran.append(msg.order)
        for _ in range(200 if msg.order == "run" else 0):  # until cancelled, at most 10 s
            if ctx.cancelled:
                ran.append("saw-cancel")
                return
            await asyncio.sleep(0.05)

    app.delivery_stages = add_stage((), CancelStage(store, poll_interval=poll))  # type: ignore[arg-type]
    return app


def status(*states: str) -> object:
    return fold("m", [Record("m", s, 1000.0 + i) for i, s in enumerate(states)])


def test_report_says_one_line_per_state() -> None:
    assert model.report("m", None, has_status=False).outcome == model.NO_STATUS
    assert "unknown without App(status=...)" in model.report("m", None, has_status=False).text
    assert model.report("m", None, has_status=True).text.startswith("unknown: no record of it")
    cases = {
        ("published",): model.PENDING,
        ("published", "received", "started", "retrying"): model.PENDING,
        ("published", "received", "started"): model.RUNNING,
        ("published", "received", "started", "succeeded"): model.HANDLED,
        ("published", "dead_lettered"): model.DEAD,
        ("published", "dead_lettered", "purged"): model.GONE,
        ("published", "cancelled"): model.AGAIN,
    }
    for states, outcome in cases.items():
        r = model.report("m", status(*states), has_status=True)  # type: ignore[arg-type]
        assert r.outcome == outcome, (states, r)
        assert "\n" not in r.text
    handled = model.report("m", status("published", "succeeded"), has_status=True)  # type: ignore[arg-type]
    assert handled.text == "already handled at 1970-01-01 00:16:41 UTC: not cancelled"
    assert handled.at == datetime.fromtimestamp(1001.0, UTC)
    assert not handled.stops_it


def test_keep_outlives_the_longest_delay() -> None:
    assert model.KEEP > 48 * 86400 + 7 * 86400


async def test_a_cancelled_message_is_acked_unrun() -> None:
    store, ran = FakeStore(), []
    app = app_with(store, ran)
    store.ids.add("c1")
    result = await deliver(app, Capture(order="o1"), message_id="c1")
    assert result.acked and result.cancelled and ran == []
    result = await deliver(app, Capture(order="o2"), message_id="c2", attempt=2)
    assert result.acked and not result.cancelled and ran == ["o2"]


async def test_lookups_of_one_turn_go_in_one_query() -> None:
    store, ran = FakeStore(), []
    app = app_with(store, ran)
    store.ids.update(f"m{i}" for i in range(0, 20, 2))
    results = await asyncio.gather(
        *(deliver(app, Capture(order=str(i)), message_id=f"m{i}") for i in range(20))
    )
    assert sum(r.cancelled for r in results) == 10
    assert len(ran) == 10
    arrivals = [q for q in store.lookups if len(q) > 1]
    assert arrivals and len(arrivals[0]) == 20, store.lookups


async def test_a_running_handler_sees_ctx_cancelled() -> None:
    store, ran = FakeStore(), []
    app = app_with(store, ran, poll=0.05)
    task = asyncio.create_task(deliver(app, Capture(order="run"), message_id="r1"))
    for _ in range(200):
        if ran:
            break
        await asyncio.sleep(0.01)
    store.ids.add("r1")  # cancelled after its lookup, while it runs
    result = await asyncio.wait_for(task, 10)
    assert result.acked and not result.cancelled
    assert ran == ["run", "saw-cancel"]


async def test_a_store_that_cannot_be_read_holds_the_message() -> None:
    store, ran = FakeStore(), []
    app = app_with(store, ran)
    store.down = True
    result = await deliver(app, Capture(order="o"), message_id="d1", attempt=2)
    assert result.retried and result.deferred and result.next_attempt == 2  # no attempt used
    assert "CancelStoreUnavailable" in (result.error or "")
    assert ran == []


async def test_testing_can_say_cancelled_without_a_store() -> None:
    ran: list[str] = []
    app = App(queue="cancel-testing")

    @app.handler(Capture)
    async def capture(msg: Capture, ctx: Context) -> None:
        ran.append(f"{msg.order}:{ctx.cancelled}")

    assert (await deliver(app, Capture(order="a"), cancelled=True)).cancelled
    assert ran == []
    result = await deliver(app, Capture(order="b"), cancelled="running")
    assert result.acked and not result.cancelled and ran == ["b:True"]
    await deliver(app, Capture(order="c"))
    assert ran[-1] == "c:False"


async def test_cancel_needs_a_cancellable_app() -> None:
    with pytest.raises(ConfigurationError, match="cancellable=True"):
        await App(queue="cancel-no").cancel("x")
    with pytest.raises(ConfigurationError, match="needs a store"):
        App(queue="cancel-no", cancellable=True)


async def test_cancel_reports_per_id_without_status() -> None:
    store, ran = FakeStore(), []
    app = app_with(store, ran)
    reports = await app.cancel("a", "b", "a")
    assert [r.message_id for r in reports] == ["a", "b", "a"]
    assert {r.outcome for r in reports} == {model.NO_STATUS}
    assert store.ids == {"a", "b"}


def test_a_retry_of_the_hold_uses_the_ladder() -> None:
    assert Retry(5000, 1, deferred=True, ladder=True).label == "ladder"


def test_a_report_says_when_its_cancellation_does_not_outlive_a_restart() -> None:
    pending = model.report("m", status("published"), has_status=True)
    late = model.report("m", status("published", "succeeded"), has_status=True)
    assert model.with_durability(pending, True).text == pending.text
    lost = model.with_durability(pending, False)
    assert lost.durable is False and lost.text == pending.text + model.NOT_DURABLE
    assert lost.to_json()["durable"] is False and lost.stops_it
    assert model.with_durability(late, False).text == late.text  # too late anyway
    assert model.with_durability(pending, None).durable is None


async def test_every_report_carries_the_stores_durability() -> None:
    store, ran = FakeStore(), []
    reports = await app_with(store, ran).cancel("a", "b")
    assert [r.durable for r in reports] == [False, False]
