"""User middleware (``App(middleware=[...])``, docs/middleware.md), without a broker:
it reads the message, wraps the handler, answers instead of it, and an exception it
raises is a failed attempt."""

from __future__ import annotations

import asyncio

import pytest

from rabbitq import App, ConfigurationError, Context, Job, Message, RetryPolicy
from rabbitq._worker.dispatch import new_job
from rabbitq._worker.stages import for_testing
from rabbitq.testing import FakeDelivery, deliver, deliver_batch


class Charge(Message, type="mw.charge"):
    cents: int


class Recording:
    def __init__(self, seen: list[str], name: str) -> None:
        self.seen, self.name = seen, name

    async def __call__(self, job: Job, call_next):
        self.seen.append(f"{self.name}>{job.message.cents}")
        outcome = await call_next(job)
        self.seen.append(f"{self.name}<{outcome.kind}")
        return outcome


def app_with(*middleware) -> tuple[App, list[str]]:
    app = App(queue="mw", retry=RetryPolicy(delays=(1, 10)), middleware=list(middleware))
    ran: list[str] = []

    @app.handler(Charge)
    async def charge(msg: Charge, ctx: Context) -> int:
        ran.append(f"handler {msg.cents}")
        if msg.cents < 0:
            raise RuntimeError("negative")
        return msg.cents * 2

    return app, ran


async def test_middleware_wraps_the_handler_in_list_order():
    seen: list[str] = []
    app, ran = app_with(Recording(seen, "a"), Recording(seen, "b"))
    result = await deliver(app, Charge(cents=5))
    assert result.acked
    assert seen == ["a>5", "b>5", "b<ack", "a<ack"]
    assert ran == ["handler 5"]


async def test_middleware_sees_a_failed_attempt_as_a_retry_outcome():
    seen: list[str] = []
    app, _ = app_with(Recording(seen, "a"))
    result = await deliver(app, Charge(cents=-1))
    assert result.retried and result.delay == "1s"
    assert seen == ["a>-1", "a<retry"]


@pytest.mark.parametrize(
    ("answer", "check"),
    [
        (lambda job: job.ack(), lambda r: r.acked and not r.duplicate),
        (lambda job: job.dead_letter("fraud", "card on a list"),
         lambda r: r.dead_lettered and r.reason == "fraud" and r.error == "card on a list"),
        (lambda job: job.retry("later"), lambda r: r.retried and r.delay == "1s"),
        (lambda job: job.retry(delay=2.5),
         lambda r: r.retried and r.delay == "2500ms" and r.next_attempt == 2),
        (lambda job: job.requeue(), lambda r: r.requeued),
    ],
)  # fmt: skip
async def test_middleware_can_answer_instead_of_the_handler(answer, check):
    class ShortCircuit:
        async def __call__(self, job, call_next):
            return answer(job)

    app, ran = app_with(ShortCircuit())
    result = await deliver(app, Charge(cents=1))
    assert check(result), result
    assert ran == []


async def test_a_retry_answered_on_the_last_attempt_is_dead_lettered_as_exhausted():
    class Always:
        async def __call__(self, job, call_next):
            return job.retry("still down")

    app, _ = app_with(Always())
    result = await deliver(app, Charge(cents=1), attempt=3)
    assert result.dead_lettered and result.reason == "exhausted"


async def test_an_exception_in_middleware_is_a_failed_attempt_not_a_lost_message():
    class Broken:
        async def __call__(self, job, call_next):
            raise ValueError("middleware bug")

    app, ran = app_with(Broken())
    result = await deliver(app, Charge(cents=1))
    assert result.retried and result.error == "ValueError: middleware bug"
    last = await deliver(app, Charge(cents=1), attempt=3)
    assert last.dead_lettered and last.reason == "exhausted"
    assert ran == []


async def test_middleware_reads_headers_state_and_after_the_call_the_result():
    found: dict[str, object] = {}

    class First:
        async def __call__(self, job, call_next):
            job.state["tenant"] = job.headers.get("tenant")
            return await call_next(job)

    class Second:
        async def __call__(self, job, call_next):
            outcome = await call_next(job)
            found.update(
                tenant=job.state["tenant"], result=job.result, key=job.ctx.idempotency_key,
                attempt=job.attempt, type=job.type_name, handler=job.handler.type_name,
            )  # fmt: skip
            return outcome

    app, _ = app_with(First(), Second())
    await deliver(app, Charge(cents=21), headers={"tenant": "acme"}, message_id="m-1")
    assert found == {
        "tenant": "acme", "result": 42, "key": "m-1", "attempt": 1,
        "type": "mw.charge", "handler": "mw.charge",
    }  # fmt: skip


async def test_undecodable_bodies_never_reach_middleware():
    seen: list[str] = []
    app, _ = app_with(Recording(seen, "a"))
    result = await deliver(app, b"not json", type="mw.charge")
    assert result.dead_lettered and result.reason == "invalid"
    assert seen == []


async def test_middleware_wraps_a_batch_handlers_wait_for_its_batch():
    seen: list[str] = []
    app = App(queue="mwb", middleware=[Recording(seen, "a")])

    @app.batch_handler(Charge, max_size=2, max_wait=0.01)
    async def many(msgs, ctx) -> None:
        seen.append(f"batch {len(msgs)}")

    results = await deliver_batch(app, [Charge(cents=1), Charge(cents=2)])
    assert all(r.acked for r in results)
    assert seen == ["a>1", "a>2", "batch 2", "a<ack", "a<ack"]


@pytest.mark.parametrize("bad", [[42], "not a list", [object()]])
def test_middleware_that_cannot_be_called_is_refused_in_one_line(bad):
    with pytest.raises(ConfigurationError) as caught:
        App(queue="mw", middleware=bad)
    assert "\n" not in str(caught.value) and "middleware" in str(caught.value)


# -- a middleware that breaks the contract still gives an outcome (issue 40) -----------


class ForgetsReturn:
    async def __call__(self, job, call_next):
        await call_next(job)  # no return


async def test_a_forgotten_return_takes_call_nexts_outcome_and_warns_once(caplog):
    app, ran = app_with(ForgetsReturn())
    pipeline = for_testing(app.handlers.values(), middleware=app.middleware)  # one, as a worker's
    outcomes = []
    with caplog.at_level("WARNING", logger="rabbitq.worker"):
        for cents in (1, -1, 2):
            body = Charge(cents=cents).model_dump_json().encode()
            delivery = FakeDelivery(body=body, type="mw.charge", message_id=f"m{cents}")
            outcomes.append(await pipeline.run(new_job(app.handlers, "mw", delivery)))
    assert [o.kind for o in outcomes] == ["ack", "retry", "ack"]
    assert outcomes[1].error == "RuntimeError: negative"
    assert ran == ["handler 1", "handler -1", "handler 2"]
    warnings = [r.getMessage() for r in caplog.records if "ForgetsReturn" in r.getMessage()]
    assert len(warnings) == 1 and "return await call_next(job)" in warnings[0], warnings


async def test_call_next_returned_unawaited_is_awaited_for_it():
    class Unawaited:
        def __call__(self, job, call_next):
            return call_next(job)  # a plain function may return the awaitable: a stage

    class AsyncUnawaited:
        async def __call__(self, job, call_next):
            return call_next(job)  # an async def must await it: taken as if it had

    class Dropped:
        async def __call__(self, job, call_next):
            call_next(job)  # neither awaited nor returned

    for middleware in (Unawaited(), AsyncUnawaited(), Dropped()):
        app, ran = app_with(middleware)
        result = await deliver(app, Charge(cents=2))
        assert result.acked, (middleware, result)
        assert ran == ["handler 2"]


@pytest.mark.parametrize("returned", [None, "ok", 42])
async def test_a_non_outcome_without_call_next_is_a_failed_attempt_naming_the_middleware(
    returned,
):
    class ReturnsJunk:
        async def __call__(self, job, call_next):
            return returned

    app, ran = app_with(ReturnsJunk())
    result = await deliver(app, Charge(cents=1))
    assert result.retried and result.delay == "1s"
    assert result.error.startswith("MiddlewareError: middleware ReturnsJunk returned")
    assert repr(returned) in result.error and "\n" not in result.error
    last = await deliver(app, Charge(cents=1), attempt=3)
    assert last.dead_lettered and last.reason == "exhausted"
    assert ran == []


async def test_a_second_call_next_is_refused_and_the_handler_runs_once():
    refused: list[str] = []

    class Twice:
        async def __call__(self, job, call_next):
            first = await call_next(job)
            try:
                await call_next(job)
            except Exception as exc:
                refused.append(f"{type(exc).__name__}: {exc}")
            return first

    class TwiceUncaught:
        async def __call__(self, job, call_next):
            await call_next(job)
            return await call_next(job)

    app, ran = app_with(Twice())
    assert (await deliver(app, Charge(cents=3))).acked
    assert ran == ["handler 3"]
    assert refused == [
        "MiddlewareError: middleware Twice called call_next a second time: the rest of the "
        "list (the handler) runs once per attempt"
    ]
    app, ran = app_with(TwiceUncaught())
    assert (await deliver(app, Charge(cents=4))).acked  # the first call's outcome stands
    failed = await deliver(app, Charge(cents=-4))
    assert failed.retried and failed.error == "RuntimeError: negative"
    assert ran == ["handler 4", "handler -4"]


async def test_a_hanging_middleware_is_bounded_by_the_handlers_timeout():
    class Hangs:
        async def __call__(self, job, call_next):
            await asyncio.sleep(3600)
            return await call_next(job)

    app = App(queue="mw", timeout=0.2, retry=RetryPolicy(delays=(1,)), middleware=[Hangs()])
    ran: list[int] = []

    @app.handler(Charge)
    async def charge(msg: Charge) -> None:
        ran.append(msg.cents)

    result = await asyncio.wait_for(deliver(app, Charge(cents=1)), 30)
    assert result.retried
    assert result.error == "HandlerTimeout: middleware Hangs ran past the handler's timeout of 0.2s"
    assert ran == []


async def test_the_middlewares_time_does_not_count_the_handlers():
    class Slowish:
        async def __call__(self, job, call_next):
            await asyncio.sleep(0.15)
            outcome = await call_next(job)
            await asyncio.sleep(0.15)
            return outcome

    app = App(queue="mw", timeout=0.4, middleware=[Slowish(), Slowish()])
    ran: list[int] = []

    @app.handler(Charge)
    async def charge(msg: Charge) -> None:
        await asyncio.sleep(0.3)
        ran.append(msg.cents)

    # Two of them: 0.6 s of middleware time on one clock of 0.4 s, a failed attempt.
    result = await deliver(app, Charge(cents=1))
    assert result.retried and "middleware Slowish ran past" in result.error
    app = App(queue="mw", timeout=0.4, middleware=[Slowish()])

    @app.handler(Charge)
    async def charge_once(msg: Charge) -> None:
        await asyncio.sleep(0.3)
        ran.append(msg.cents)

    # One: 0.3 s of middleware and 0.3 s of handler, each within the 0.4 s.
    assert (await deliver(app, Charge(cents=2))).acked
    assert ran == [1, 2]


async def test_returning_before_call_nexts_outcome_is_a_failed_attempt():
    spawned: list[asyncio.Task] = []

    class Spawns:
        async def __call__(self, job, call_next):
            spawned.append(asyncio.ensure_future(call_next(job)))
            await asyncio.sleep(0)  # the rest has started, in a task of its own
            return None

    app = App(queue="mw", timeout=0.2, retry=RetryPolicy(delays=(1,)), middleware=[Spawns()])

    @app.handler(Charge)
    async def charge(msg: Charge) -> None:
        await asyncio.sleep(0.3)  # past the timeout, after the middleware returned

    result = await deliver(app, Charge(cents=1))
    assert result.retried and "before call_next's outcome came" in result.error
    await asyncio.sleep(0.5)  # the middleware's clock, stopped, cancels nothing later
    outcome = await spawned[0]
    assert outcome.kind == "retry" and "HandlerTimeout" in outcome.error
