"""Batch handlers through rabbitq.testing: registration, the handler's three answers,
duplicates removed before the call (a real Redis store), the timeout per batch."""

from __future__ import annotations

import asyncio

import pytest

from rabbitq import App, BatchContext, BatchResult, ConfigurationError, Message, RetryPolicy
from rabbitq.effects import RedisStore, StoreUnavailable, guard
from rabbitq.effects.store import BUSY, NEW, Claim
from rabbitq.testing import deliver, deliver_batch
from tests.helpers import REDIS_URL


class Mail(Message, type="test.batch.mail"):
    to: str


def mails(n: int) -> list[Mail]:
    return [Mail(to=f"u{i}@example.com") for i in range(n)]


def make_app(**kwargs) -> App:
    kwargs.setdefault("retry", RetryPolicy(delays=(1, 10)))
    kwargs.setdefault("prefetch", 200)  # room for the default max_size of 100
    return App(queue="test-batch", **kwargs)


def test_a_batch_larger_than_the_prefetch_is_refused_when_registered():
    app = make_app(prefetch=50)
    with pytest.raises(ConfigurationError, match=r"max_size=100, above the prefetch \(50\)"):
        app.batch_handler(Mail, max_size=100)


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"max_size": 0}, "max_size must be a positive integer"),
        ({"max_wait": 0}, "max_wait must be positive seconds"),
    ],
)
def test_bad_batch_limits_are_one_line_errors(kwargs, says):
    with pytest.raises(ConfigurationError, match=says):
        make_app().batch_handler(Mail, **kwargs)


def test_a_sync_batch_handler_is_refused():
    with pytest.raises(ConfigurationError, match="must be async def"):

        @make_app().batch_handler(Mail, max_size=10)
        def send(msgs: list[Mail]) -> None: ...


async def test_batches_are_cut_at_max_size_and_all_succeed_when_the_handler_returns_none():
    app = make_app(prefetch=10)
    seen: list[list[str]] = []

    @app.batch_handler(Mail, max_size=4)
    async def send(msgs: list[Mail], ctx: BatchContext) -> None:
        assert ctx.size == len(msgs) and ctx.type == "test.batch.mail"
        seen.append([m.to for m in msgs])

    results = await deliver_batch(app, mails(10))
    assert [len(b) for b in seen] == [4, 4, 2]
    assert [r.acked for r in results] == [True] * 10


async def test_a_raising_batch_retries_each_message_on_its_own_attempt():
    app = make_app()

    @app.batch_handler(Mail)
    async def send(msgs: list[Mail]) -> None:
        raise RuntimeError("provider down")

    results = await deliver_batch(app, mails(3), attempts=[1, 2, 3])
    assert [(r.outcome, r.next_attempt) for r in results[:2]] == [("retry", 2), ("retry", 3)]
    assert results[0].delay == "1s" and results[1].delay == "10s"
    assert results[2].dead_lettered and results[2].reason == "exhausted"
    assert "provider down" in (results[2].error or "")


async def test_a_batch_result_retries_and_dead_letters_only_the_messages_it_names():
    app = make_app()

    @app.batch_handler(Mail)
    async def send(msgs: list[Mail], ctx: BatchContext) -> BatchResult:
        return BatchResult().retry(1, "throttled").dead_letter(msgs[3], "hard bounce")

    results = await deliver_batch(app, mails(5))
    assert [r.outcome for r in results] == ["ack", "retry", "ack", "dead-letter", "ack"]
    assert "throttled" in (results[1].error or "")
    assert results[3].reason == "permanent" and "hard bounce" in (results[3].error or "")


async def test_an_outcome_for_a_message_not_in_the_batch_fails_the_whole_batch():
    app = make_app()

    @app.batch_handler(Mail)
    async def send(msgs: list[Mail]) -> BatchResult:
        return BatchResult().retry(len(msgs))

    results = await deliver_batch(app, mails(2))
    assert all(r.retried for r in results)
    assert "named message 2, but its batch has 2" in (results[0].error or "")


async def test_the_timeout_is_per_batch():
    app = make_app(timeout=0.05)

    @app.batch_handler(Mail)
    async def send(msgs: list[Mail]) -> None:
        await asyncio.sleep(5)

    results = await deliver_batch(app, mails(3))
    assert all(r.retried and "timeout of 0.05s" in (r.error or "") for r in results)


async def test_a_single_delivery_to_a_batch_handler_is_a_batch_of_one():
    app = make_app()
    sizes: list[int] = []

    @app.batch_handler(Mail)
    async def send(msgs: list[Mail]) -> None:
        sizes.append(len(msgs))

    assert (await deliver(app, Mail(to="a@example.com"))).acked and sizes == [1]


async def test_with_a_store_repeated_and_done_keys_are_duplicates_removed_before_the_call(
    redis_prefix,
):
    store = RedisStore(REDIS_URL, key_prefix=redis_prefix)
    app = make_app(idempotency=store)
    calls: list[list[str]] = []

    @app.batch_handler(Mail, key=lambda m: m.to)
    async def send(msgs: list[Mail], ctx: BatchContext) -> BatchResult:
        calls.append([m.to for m in msgs])
        assert list(ctx.keys) == [m.to for m in msgs]
        return BatchResult().retry(ctx.keys.index("c"))

    try:
        first = await deliver_batch(app, [Mail(to=t) for t in ["a", "b", "a", "c"]])
        assert calls == [["a", "b", "c"]]
        assert [(r.outcome, r.duplicate) for r in first] == [
            ("ack", False), ("ack", False), ("ack", True), ("retry", False),
        ]  # fmt: skip
        # "a" and "b" are done: duplicates; "c" failed, so its key was released: it runs
        second = await deliver_batch(app, [Mail(to=t) for t in ["b", "c", "a"]])
        assert calls[1] == ["c"]
        assert [r.duplicate for r in second] == [True, False, True]
    finally:
        await store.close()


class FakeStore:
    """A store whose answer per key is given: a status, or an exception to raise."""

    retention = 60.0

    def __init__(self, answers: dict[str, object]) -> None:
        self.answers = answers
        self.done_keys: list[str] = []
        self.released: list[str] = []

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def claim(self, key: str, *, lease: float) -> Claim:
        answer = self.answers.get(key, NEW)
        if isinstance(answer, Exception):
            raise answer
        return Claim(key, answer)

    async def done(self, claim: Claim) -> bool:
        self.done_keys.append(claim.key)
        return True

    async def release(self, claim: Claim) -> None:
        self.released.append(claim.key)


async def test_a_key_busy_elsewhere_waits_in_the_first_tier_and_a_store_failure_fails_its_attempt(
    monkeypatch,
):
    monkeypatch.setattr(guard, "BUSY_WAIT", 0.05)
    store = FakeStore({"busy": BUSY, "down": StoreUnavailable("redis is down")})
    app = make_app(idempotency=store)
    calls: list[list[str]] = []

    @app.batch_handler(Mail, key=lambda m: m.to)
    async def send(msgs: list[Mail]) -> None:
        calls.append([m.to for m in msgs])

    results = await deliver_batch(
        app, [Mail(to=t) for t in ["busy", "ok", "down"]], attempts=[2, 1, 1]
    )
    assert calls == [["ok"]] and store.done_keys == ["ok"]
    busy, ok, down = results
    assert busy.retried and busy.next_attempt == 2 and busy.delay == "1s"  # no attempt used
    assert "KeyBusy" in (busy.error or "")
    assert ok.acked
    assert down.retried and down.next_attempt == 2 and "redis is down" in (down.error or "")


async def test_a_key_function_that_fails_on_one_message_fails_only_that_message():
    app = make_app()
    calls: list[int] = []

    def key(m: Mail) -> str:
        if m.to == "bad":
            raise ValueError("no key for this one")
        return m.to

    @app.batch_handler(Mail, idempotency=FakeStore({}), key=key)
    async def send(msgs: list[Mail]) -> None:
        calls.append(len(msgs))

    results = await deliver_batch(app, [Mail(to=t) for t in ["a", "bad", "b"]])
    assert calls == [2]
    assert [r.outcome for r in results] == ["ack", "retry", "ack"]
    assert "no key for this one" in (results[1].error or "")


async def test_keys_of_messages_the_batch_failed_on_are_released_the_rest_marked_done():
    store = FakeStore({})
    app = make_app(idempotency=store)

    @app.batch_handler(Mail, key=lambda m: m.to)
    async def send(msgs: list[Mail]) -> BatchResult:
        return BatchResult().retry(1)

    await deliver_batch(app, [Mail(to=t) for t in ["a", "b", "c"]])
    assert store.done_keys == ["a", "c"] and store.released == ["b"]
