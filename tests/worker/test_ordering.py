"""worker.ordering without a broker: keys, lines, held retries, blocked keys."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from rabbitq import App, Message, PermanentError, RetryPolicy
from rabbitq._worker.dispatch import compose, new_job
from rabbitq._worker.ordering import BLOCKED, UNKNOWN, Ordering, blocked_outcome, key_of
from rabbitq._worker.stages import for_testing
from rabbitq.errors import ConfigurationError
from rabbitq.hooks import Hooks
from rabbitq.message import encode
from rabbitq.outcome import Ack, DeadLetter


class Op(Message, type="test.ordering.op"):
    account: str
    seq: int


class Fake:
    """The fields of a delivery that dispatch reads."""

    def __init__(self, m: Op, headers: dict[str, Any] | None = None) -> None:
        self.body = encode(m)
        self.headers = headers or {}
        self.type = Op.type_name()
        self.routing_key = Op.type_name()
        self.exchange = "x"
        self.message_id = f"{m.account}-{m.seq}"
        self.correlation_id = None
        self.redelivered = False
        self.timestamp = None


class Blocked(Hooks):
    def __init__(self) -> None:
        self.seen: list[tuple[str, ...]] = []

    def keys_blocked(self, queue: str, keys: tuple[str, ...]) -> None:
        self.seen.append(keys)


def app_with(fn: Any, **options: Any) -> App:
    app = App(queue="q", retry=RetryPolicy(delays=(0.01, 0.01)))
    app.handler(Op, ordered_by=lambda m: m.account, **options)(fn)
    return app


async def run_all(ordering: Ordering, app: App, deliveries: list[Fake]) -> list[Any]:
    """As the worker does: arrive in order, run concurrently, settle at task end."""
    run = compose([ordering], for_testing(app.handlers.values(), middleware=()).run)
    tasks = []
    for d in deliveries:
        job = new_job(app.handlers, "q", d)
        settled = ordering.arrive(job)
        task = asyncio.ensure_future(run(job))
        if settled is not None:
            task.add_done_callback(settled)
        tasks.append(task)
    return await asyncio.gather(*tasks)


def test_the_key_is_ordered_by_of_the_decoded_body():
    app = app_with(lambda m: None)
    handler = app.handlers[Op.type_name()]
    assert key_of(handler, encode(Op(account="a-1", seq=1))) == "a-1"
    assert key_of(handler, b"not json") is None  # dead-lettered as invalid, no turn
    assert key_of(None, b"{}") is None


def test_the_publishers_key_header_wins_and_an_opaque_body_has_no_known_key():
    app = app_with(lambda m: None)
    handler = app.handlers[Op.type_name()]
    body = encode(Op(account="a-1", seq=1))
    assert key_of(handler, b"\x01ciphertext", {"rabbitq-key": "a-1"}) == "a-1"
    assert key_of(handler, b"", {"rabbitq-key": b"a-1"}) == "a-1"  # bytes from a producer
    assert key_of(handler, b"\x01ciphertext", {"rabbitq-key-id": "k1"}) is UNKNOWN
    assert key_of(handler, b"", {"rabbitq-blob": "b1"}) is UNKNOWN
    assert key_of(handler, body, {"rabbitq-key-id": "k1", "rabbitq-key": "a-1"}) == "a-1"
    failing = App(queue="q")
    failing.handler(Op, ordered_by=lambda m: 1 / 0)(lambda m: None)
    assert key_of(failing.handlers[Op.type_name()], body) is UNKNOWN


async def test_a_delivery_of_no_known_key_runs_alone_between_the_others(caplog):
    events: list[tuple[str, str, int]] = []

    async def handle(m: Op) -> None:
        events.append(("start", m.account, m.seq))
        await asyncio.sleep(random.uniform(0, 0.003))
        events.append(("end", m.account, m.seq))

    app = app_with(handle)
    ordering = Ordering("q", app.handlers, Hooks())
    unknown = Fake(Op(account="u", seq=0))
    unknown.headers = {"rabbitq-blob": "b1"}  # as if offloaded: its body is not the key's
    unknown.body = encode(Op(account="u", seq=0))  # (the fetch stage is not in this list)
    deliveries = [Fake(Op(account=f"a{k}", seq=s)) for s in range(3) for k in range(3)]
    deliveries[4:4] = [unknown]
    outcomes = await run_all(ordering, app, deliveries)

    assert all(isinstance(o.decision, Ack) for o in outcomes)
    at = events.index(("start", "u", 0))
    assert events[at + 1] == ("end", "u", 0)  # nothing ran beside it
    ended_before = {(a, n) for kind, a, n in events[:at] if kind == "end"}
    assert ended_before == {("a0", 0), ("a1", 0), ("a2", 0), ("a0", 1)}  # those before it
    assert "ordering key cannot be known" in caplog.text
    assert ordering._barrier is None and not ordering._tails  # nothing left held


def test_on_dead_block_needs_ordered_by_and_a_known_value():
    app = App(queue="q")
    with pytest.raises(ConfigurationError, match="needs ordered_by"):
        app.handler(Op, on_dead="block")
    with pytest.raises(ConfigurationError, match="'skip' or 'block'"):
        app.handler(Op, ordered_by=lambda m: m.account, on_dead="stop")  # type: ignore[arg-type]


def test_a_blocked_outcome_is_a_dead_letter_that_names_the_key():
    outcome = blocked_outcome("a-1", "m-7", "t", 1)
    assert outcome.decision == DeadLetter(BLOCKED)
    assert "a-1" in (outcome.error or "") and "m-7" in (outcome.error or "")


async def test_one_key_runs_in_order_and_keys_run_together():
    running: set[str] = set()
    overlap = 0
    seen: dict[str, list[int]] = {}

    async def handle(m: Op) -> None:
        nonlocal overlap
        assert m.account not in running, "two messages of one key at once"
        running.add(m.account)
        overlap = max(overlap, len(running))
        await asyncio.sleep(random.uniform(0, 0.003))
        running.discard(m.account)
        seen.setdefault(m.account, []).append(m.seq)

    app = app_with(handle)
    ordering = Ordering("q", app.handlers, Hooks())
    deliveries = [Fake(Op(account=f"a{k}", seq=s)) for s in range(20) for k in range(4)]
    outcomes = await run_all(ordering, app, deliveries)

    assert all(isinstance(o.decision, Ack) for o in outcomes)
    assert seen == {f"a{k}": list(range(20)) for k in range(4)}
    assert overlap > 1  # different keys ran concurrently
    assert not ordering._tails  # every line ended


async def test_a_failed_message_is_retried_before_the_next_of_its_key():
    failed: set[int] = set()
    seen: list[int] = []

    async def handle(m: Op) -> None:
        if m.seq % 3 == 0 and m.seq not in failed:
            failed.add(m.seq)
            raise RuntimeError("first attempt fails")
        seen.append(m.seq)

    app = app_with(handle)
    ordering = Ordering("q", app.handlers, Hooks())
    outcomes = await run_all(ordering, app, [Fake(Op(account="a", seq=s)) for s in range(10)])

    assert seen == list(range(10))
    assert [o.attempt for o in outcomes if o.attempt > 1] == [2, 2, 2, 2]


async def test_skip_lets_the_key_go_on_after_a_dead_letter():
    seen: list[int] = []

    async def handle(m: Op) -> None:
        if m.seq == 1:
            raise PermanentError("no")
        seen.append(m.seq)

    app = app_with(handle)
    ordering = Ordering("q", app.handlers, Hooks())
    outcomes = await run_all(ordering, app, [Fake(Op(account="a", seq=s)) for s in range(4)])

    assert outcomes[1].decision == DeadLetter("permanent")
    assert seen == [0, 2, 3]


async def test_block_sends_the_rest_of_the_key_to_the_dlq_until_a_replay():
    seen: list[tuple[str, int]] = []
    broken = {("a", 1)}

    async def handle(m: Op) -> None:
        if (m.account, m.seq) in broken:
            raise PermanentError("no")
        seen.append((m.account, m.seq))

    app = app_with(handle, on_dead="block")
    hooks = Blocked()
    ordering = Ordering("q", app.handlers, hooks)
    first = [Fake(Op(account=a, seq=s)) for s in range(4) for a in ("a", "b")]
    outcomes = await run_all(ordering, app, first)

    reasons = [o.decision.reason for o in outcomes if isinstance(o.decision, DeadLetter)]
    assert reasons == ["permanent", BLOCKED, BLOCKED]
    assert seen == [("a", 0), ("b", 0), ("b", 1), ("b", 2), ("b", 3)]
    assert ordering.blocked == {"a": "a-1"} and hooks.seen == [("a",)]

    broken.clear()  # the operator fixed the cause and replays the DLQ, in its order
    replayed = [Fake(Op(account="a", seq=s), {"rabbitq-replayed": 1}) for s in (1, 2, 3)]
    await run_all(ordering, app, [*replayed, Fake(Op(account="a", seq=4))])

    assert seen[-4:] == [("a", 1), ("a", 2), ("a", 3), ("a", 4)]
    assert ordering.blocked == {} and hooks.seen[-1] == ()


async def test_unordered_handlers_are_not_held():
    app = App(queue="q")
    app.handler(Op)(lambda m: None)
    assert Ordering.wanted("q", app.handlers, Hooks()) is None


def test_held_retries_that_could_outlast_the_consumer_timeout_are_named():
    from rabbitq._worker.ordering import hold_problems

    app = App(queue="q", retry=RetryPolicy(delays=(1, 10, 60, 600)))
    app.handler(Op, ordered_by=lambda m: m.account, timeout=300)(lambda m: None)
    [problem] = hold_problems(app.handlers, 1800)
    assert "2171s" in problem and "consumer_timeout (1800s)" in problem

    short = App(queue="q", retry=RetryPolicy(delays=(1, 5)))
    short.handler(Op, ordered_by=lambda m: m.account, timeout=30)(lambda m: None)
    assert hold_problems(short.handlers, 1800) == []
    assert hold_problems(app.handlers, 0) == []  # the broker has no timeout


async def test_a_delivery_settled_without_running_leaves_nothing_behind():
    app = app_with(lambda m: None)
    ordering = Ordering("q", app.handlers, Hooks())
    d = Fake(Op(account="a", seq=1))
    settled = ordering.arrive(new_job(app.handlers, "q", d))
    assert settled is not None
    settled(None)  # e.g. returned by an open circuit breaker, never processed
    assert not ordering._turns and not ordering._tails


def failing_at(account: str, seq: int, seen: list[tuple[str, int]]) -> Any:
    """A handler that dead-letters message ``seq`` of ``account`` and records the rest."""

    async def handle(m: Op) -> None:
        if (m.account, m.seq) == (account, seq):
            raise PermanentError("declined")
        seen.append((m.account, m.seq))

    return handle


def on(channel: object, m: Op, headers: dict[str, Any] | None = None) -> Fake:
    """A delivery of ``m`` on consume channel ``channel``."""
    delivery = Fake(m, headers)
    delivery.channel = channel  # type: ignore[attr-defined]
    return delivery


class FakeRegistry:
    """A registry of blocked keys in memory, read per consume channel as the broker's."""

    name = "q.blocked"

    def __init__(self, keys: dict[str, str]) -> None:
        self.keys = dict(keys)
        self.reads: list[object] = []
        self._read_on: object = None

    def stale(self, channel: object) -> bool:
        return channel is None or channel is not self._read_on

    async def read(self, channel: object) -> dict[str, str]:
        self.reads.append(channel)
        self._read_on = channel
        return dict(self.keys)

    async def add(self, key: str, dead: str) -> bool:
        self.keys[key] = dead
        return True

    async def remove(self, key: str) -> None:
        self.keys.pop(key, None)


async def test_blocked_keys_are_read_from_the_registry_once_per_consume_channel():
    seen: list[tuple[str, int]] = []
    app = app_with(failing_at("b", 1, seen), on_dead="block")
    hooks = Blocked()
    ordering = Ordering("q", app.handlers, hooks)
    registry = ordering.registry = FakeRegistry({"a": "a-0"})  # type: ignore[assignment]
    channel, later = object(), object()

    outcomes = await run_all(ordering, app, [on(channel, Op(account=k, seq=1)) for k in "ab"])
    assert registry.reads == [channel]  # once, before the first ordered delivery ran
    assert [getattr(o.decision, "reason", None) for o in outcomes] == [BLOCKED, "permanent"]
    assert seen == [] and registry.keys == {"a": "a-0", "b": "b-1"}  # b kept in the broker
    assert hooks.seen[0] == ("a",)

    # A new consume channel (a reconnect): read again; a replay takes its key out.
    replayed = on(later, Op(account="a", seq=0), {"rabbitq-replayed": 1})
    await run_all(ordering, app, [replayed, on(later, Op(account="a", seq=2))])
    assert registry.reads == [channel, later]
    assert seen == [("a", 0), ("a", 2)] and registry.keys == {"b": "b-1"}
    assert ordering.blocked == {"b": "b-1"}


class SlowRegistry(FakeRegistry):
    """Reads one at a time and slowly, each seeing the keys there when its scan began
    (as the broker's registry: ``basic.get`` until empty, under a lock)."""

    def __init__(self, keys: dict[str, str]) -> None:
        super().__init__(keys)
        self.lock = asyncio.Lock()

    async def read(self, channel: object) -> dict[str, str] | None:
        async with self.lock:
            if channel is not None and channel is self._read_on:
                return None  # read for this channel meanwhile
            snapshot = dict(self.keys)
            await asyncio.sleep(0.05)
            self.reads.append(channel)
            self._read_on = channel
            return snapshot


async def test_a_key_blocked_while_another_delivery_reads_the_registry_stays_blocked():
    # Seen under CI load: b1 waited for the registry read that a1 started, read it again,
    # and its older view replaced the block that a2 had set meanwhile; a3 and a4 ran.
    seen: list[tuple[str, int]] = []
    app = app_with(failing_at("a", 2, seen), on_dead="block")
    ordering = Ordering("q", app.handlers, Blocked())
    registry = ordering.registry = SlowRegistry({})  # type: ignore[assignment]
    channel = object()

    ops = [Op(account=k, seq=s) for s in (1, 2, 3, 4) for k in "ab"]
    await run_all(ordering, app, [on(channel, op) for op in ops])
    assert [s for k, s in seen if k == "a"] == [1], seen
    assert [s for k, s in seen if k == "b"] == [1, 2, 3, 4]
    assert ordering.blocked == {"a": registry.keys["a"]}
    assert registry.reads == [channel]


async def test_a_registry_read_keeps_what_was_blocked_or_unblocked_while_it_ran():
    # A new consume channel's read (a reconnect) may run while deliveries of the old one
    # block or unblock keys: the scan began before, so it must not undo them.
    app = app_with(lambda m: None, on_dead="block")
    ordering = Ordering("q", app.handlers, Blocked())
    registry = ordering.registry = SlowRegistry({"c": "c-1", "d": "d-1"})  # type: ignore[assignment]
    ordering.blocked = {"c": "c-1"}
    reading = asyncio.create_task(ordering._read_registry(object()))
    await asyncio.sleep(0.01)  # the scan has begun: it sees c and d
    await ordering._block("a", "a-2")
    await ordering._unblock("c")
    await reading
    assert ordering.blocked == {"a": "a-2", "d": "d-1"}
    assert registry.keys == {"d": "d-1", "a": "a-2"}


async def test_a_replayed_message_never_overtakes_the_one_that_blocked_its_key():
    # Issue 33, item 1 (examples/ledger.py's flow): the replayed overdraft fails again
    # and blocks again; the replayed deposit behind it must not unblock the key and run.
    seen: list[tuple[str, int]] = []
    broken = {("a", 1)}

    async def handle(m: Op) -> None:
        if (m.account, m.seq) in broken:
            raise PermanentError("overdraft")
        seen.append((m.account, m.seq))

    app = app_with(handle, on_dead="block")
    ordering = Ordering("q", app.handlers, Blocked())
    await run_all(ordering, app, [Fake(Op(account="a", seq=s)) for s in range(3)])
    assert seen == [("a", 0)] and ordering.blocked == {"a": "a-1"}

    # The cause is not fixed: the replay brings a-1 (fails again) and a-2 behind it.
    replayed = [Fake(Op(account="a", seq=s), {"rabbitq-replayed": 1}) for s in (1, 2)]
    outcomes = await run_all(ordering, app, replayed)
    reasons = [o.decision.reason for o in outcomes]
    assert reasons == ["permanent", BLOCKED]  # a-2 back to the DLQ, behind a-1
    assert seen == [("a", 0)] and ordering.blocked == {"a": "a-1"}

    # A replayed a-2 alone (a-1 still dead) does not lift the block either.
    alone = await run_all(ordering, app, [Fake(Op(account="a", seq=2), {"rabbitq-replayed": 2})])
    assert alone[0].decision == DeadLetter(BLOCKED) and ordering.blocked == {"a": "a-1"}

    # The operator drops a-1 and replays a-2 marked --unblock: it lifts the block.
    marked = Fake(Op(account="a", seq=2), {"rabbitq-replayed": 3, "rabbitq-unblock": 1})
    await run_all(ordering, app, [marked])
    assert seen == [("a", 0), ("a", 2)] and ordering.blocked == {}


def test_only_the_blocking_message_or_an_unblock_replay_lifts_a_block():
    from rabbitq._worker.ordering import lifts_block

    assert lifts_block({"rabbitq-replayed": 1}, "m-1", "m-1")
    assert not lifts_block({"rabbitq-replayed": 1}, "m-2", "m-1")
    assert not lifts_block({}, "m-1", "m-1")  # not a replay: a redelivery of it
    assert lifts_block({"rabbitq-replayed": 1, "rabbitq-unblock": 1}, "m-2", "m-1")
