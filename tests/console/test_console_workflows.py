"""A chain stopped at a dead-lettered step resumes from that step when the step is
replayed from the console (docs/workflows.md; the CLI's replay is in
tests/integration/workflow/test_workflows_live.py)."""

from __future__ import annotations

import asyncio

from rabbitq import App, Context, Message, PermanentError, Worker, chain
from tests.helpers import Recorder, running, wait_for

from .conftest import act, result, sign_in


class Step(Message, type="test.console.chain.step"):
    n: int


async def test_a_chain_replayed_from_the_console_resumes_at_its_dead_step(make_console, app: App):
    seen: list[int] = []
    broken = {3}

    @app.handler(Step)
    async def step(msg: Step, ctx: Context) -> None:
        if msg.n in broken:
            raise PermanentError("step 3 is down")
        seen.append(msg.n)

    recorder = Recorder()
    async with running(Worker(app, hooks=recorder)):
        async with app.publisher() as pub:
            await pub.publish(chain(*(Step(n=n) for n in range(1, 6))))
        await wait_for(lambda: recorder.count("dead_lettered") == 1)
        await asyncio.sleep(0.3)
        assert seen == [1, 2]  # stopped at the dead letter
        broken.clear()
        client = make_console()
        sign_in(client)
        page = await asyncio.to_thread(client.get, f"/q/{app.queue}")
        job = await asyncio.to_thread(act, client, page.text, app.queue, "replay:filter")
        assert result(job, "done") == 1
        await wait_for(lambda: seen == [1, 2, 3, 4, 5])
        await asyncio.sleep(0.3)
    assert seen == [1, 2, 3, 4, 5]  # resumed from step 3, each step once
