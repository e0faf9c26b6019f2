"""The worker's admission: a limited handler's gate first, then a handler slot."""

from __future__ import annotations

import asyncio
from collections import Counter

from rabbitq import App, Hooks, Message
from rabbitq._worker.admission import Admission


class Slow(Message, type="admission.slow"):
    pass


class Other(Message, type="admission.other"):
    pass


class _Seen(Hooks):
    def __init__(self) -> None:
        self.waited: list[tuple[str, float]] = []
        self.running: list[tuple[str, int]] = []

    def limit_waited(self, queue: str, type_name: str, seconds: float) -> None:
        self.waited.append((type_name, seconds))

    def limit_running(self, queue: str, type_name: str, running: int) -> None:
        self.running.append((type_name, running))


def _limits(app: App) -> dict[str, object]:
    return {name: handler.limit for name, handler in app.handlers.items()}


def _admission(hooks: Hooks, **limits: object) -> Admission:
    app = App(queue="admission-test", prefetch=2)

    @app.handler(Slow, **limits)  # type: ignore[arg-type]
    async def slow(msg: Slow) -> None: ...

    @app.handler(Other)
    async def other(msg: Other) -> None: ...

    return Admission(app.queue, _limits(app), prefetch=app.prefetch, hooks=hooks)


def test_without_limited_handlers_admission_is_not_needed() -> None:
    app = App(queue="admission-test", prefetch=8)

    @app.handler(Other)
    async def other(msg: Other) -> None: ...

    admission = Admission(app.queue, _limits(app), prefetch=8, hooks=Hooks())
    assert not admission and admission.broker_prefetch == 8


async def test_a_delivery_waiting_for_its_limit_holds_no_handler_slot() -> None:
    seen = _Seen()
    admission = _admission(seen, rate_limit="1/10s")
    assert admission and admission.broker_prefetch == 4  # 2 slots + a waiting room of 2
    await admission.enter("admission.slow")  # the first slot of the rate is free
    waiting = asyncio.create_task(admission.enter("admission.slow"))  # ~10 s away
    await asyncio.sleep(0.01)
    # The one other slot is still free for another type, at once.
    await asyncio.wait_for(admission.enter("admission.other"), timeout=1)
    assert not waiting.done()
    waiting.cancel()
    admission.leave("admission.other")
    admission.leave("admission.slow")
    # The first went at once: far less than the 10 s the next one waits.
    assert seen.waited[0][0] == "admission.slow" and seen.waited[0][1] < 1.0
    assert seen.running == [("admission.slow", 1), ("admission.slow", 0)]


async def test_no_more_than_prefetch_handlers_run_and_the_cap_holds() -> None:
    admission = _admission(Hooks(), concurrency=1)
    running: Counter[str] = Counter()
    peak: Counter[str] = Counter()
    total_peak = 0

    async def job(type_name: str) -> None:
        nonlocal total_peak
        await admission.enter(type_name)
        running[type_name] += 1
        peak[type_name] = max(peak[type_name], running[type_name])
        total_peak = max(total_peak, sum(running.values()))
        await asyncio.sleep(0.001)
        running[type_name] -= 1
        admission.leave(type_name)

    await asyncio.gather(*(job(t) for t in ["admission.slow", "admission.other"] * 30))
    assert peak["admission.slow"] == 1 and total_peak == 2
