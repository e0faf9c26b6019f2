"""``rabbitq worker --reload`` and ``--wait-for-broker``, through the real command as a
subprocess: an edited module's new handler handles the next message; a worker started
before its broker waits for it, or gives up in one line."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import uuid
from pathlib import Path

import pytest

from tests.helpers import ROOT, assert_one_line_error, run_cli, run_cli_async
from tests.proxy import TcpProxy

BROKER = os.environ.get("RABBITQ_TEST_URL", "amqp://guest:guest@127.0.0.1:5672/")

SERVICE = """
from pathlib import Path

from rabbitq import App, Message


class Ping(Message, type="{queue}.ping"):
    n: int


app = App(queue="{queue}")


@app.handler(Ping)
async def ping(msg: Ping) -> None:
    with open(Path(__file__).with_name("handled.txt"), "a") as out:
        out.write(f"{version} {{msg.n}}\\n")
"""


class Worker:
    """``rabbitq worker ARGS`` as a subprocess whose output lines are read as they come."""

    def __init__(self, cwd: Path, *args: str, url: str = BROKER) -> None:
        self.cwd, self.args, self.url = cwd, args, url
        self.lines: list[str] = []
        self.process: asyncio.subprocess.Process | None = None

    async def __aenter__(self) -> Worker:
        env = {k: v for k, v in os.environ.items() if k != "RABBITQ_URL"}
        env.update(NO_COLOR="1", PYTHONPATH=str(ROOT), RABBITQ_URL=self.url)
        self.process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "rabbitq", "worker", *self.args, cwd=self.cwd, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        return self

    async def wait_for_line(self, text: str, *, after: int = 0, timeout: float = 60) -> int:
        """The index of the first line from ``after`` on that holds ``text``."""
        assert self.process is not None and self.process.stdout is not None

        async def read() -> int:
            while True:
                for i in range(after, len(self.lines)):
                    if text in self.lines[i]:
                        return i
                line = await self.process.stdout.readline()  # type: ignore[union-attr]
                assert line, f"exited before {text!r}:\n" + "".join(self.lines)
                self.lines.append(line.decode())

        try:
            return await asyncio.wait_for(read(), timeout)
        except TimeoutError:
            raise AssertionError(f"no {text!r} in:\n" + "".join(self.lines)) from None

    async def stop(self) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        rest, _ = await asyncio.wait_for(self.process.communicate(), 60)
        self.lines += rest.decode().splitlines(keepends=True)
        return self.process.returncode or 0

    async def __aexit__(self, *exc: object) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.kill()
            await self.process.wait()


@pytest.fixture
def module(tmp_path: Path) -> tuple[Path, str]:
    """service.py in a directory of its own (the one --reload watches), its queue name."""
    queue = f"t.dev.{uuid.uuid4().hex[:8]}"
    (tmp_path / "service.py").write_text(SERVICE.format(queue=queue, version="v1"))
    return tmp_path, queue


@pytest.fixture
def service(module: tuple[Path, str]):
    """:func:`module`, its queues deleted from the broker afterwards."""
    yield module
    run_cli("topology", "service:app", "--delete", "--force", cwd=module[0], url=BROKER)


async def handled(cwd: Path, line: str, timeout: float = 60) -> None:
    path = cwd / "handled.txt"
    for _ in range(int(timeout * 10)):
        if path.exists() and line in path.read_text().splitlines():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{line!r} not handled: {path.read_text() if path.exists() else ''}")


async def publish(cwd: Path, queue: str, n: int) -> None:
    result = await run_cli_async("publish", "service:app", f"{queue}.ping", f'{{"n": {n}}}',
                                 cwd=cwd, url=BROKER)  # fmt: skip
    assert result.returncode == 0, result.stderr


@pytest.mark.services
async def test_reload_restarts_the_worker_on_an_edit_and_the_new_handler_handles_the_next_message(
    service,
):
    cwd, queue = service
    async with Worker(cwd, "service:app", "--reload") as worker:
        first = await worker.wait_for_line(f"consuming '{queue}'")
        await publish(cwd, queue, 1)
        await handled(cwd, "v1 1")
        (cwd / "service.py").write_text(SERVICE.format(queue=queue, version="v2"))
        restart = await worker.wait_for_line("service.py changed: restarting the worker")
        await worker.wait_for_line(f"consuming '{queue}'", after=restart)
        assert restart > first
        await publish(cwd, queue, 2)
        await handled(cwd, "v2 2")
        assert await worker.stop() == 0
    assert (cwd / "handled.txt").read_text() == "v1 1\nv2 2\n"
    assert sum("restarting the worker" in line for line in worker.lines) == 1
    # what the start-up says of the configuration is said once, not after each restart
    assert sum("consumer_timeout taken to be" in line for line in worker.lines) == 1
    assert "SIGTERM received: stopping the worker" in "".join(worker.lines)


def test_reload_with_several_processes_is_refused_in_one_line(module):
    cwd, _ = module
    result = run_cli("worker", "service:app", "--reload", "--processes", "2", cwd=cwd)
    line = assert_one_line_error(result, exit_code=2)
    assert "--reload runs one worker process: drop --processes" in line


def test_reload_without_watchfiles_names_the_extra_in_one_line(module):
    cwd, _ = module
    blocked = cwd / "blocked" / "watchfiles"
    blocked.mkdir(parents=True)
    (blocked / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'watchfiles'\", name='watchfiles')\n"
    )
    env = {"PYTHONPATH": f"{cwd / 'blocked'}{os.pathsep}{ROOT}"}
    result = run_cli("worker", "service:app", "--reload", cwd=cwd, env=env)
    assert assert_one_line_error(result) == (
        "Error: rabbitq worker --reload needs the 'reload' extra: "
        "pip install 'rabbitq[reload]' (watchfiles missing)"
    )


@pytest.mark.services
async def test_a_worker_started_before_its_broker_waits_for_it_and_then_consumes(service):
    cwd, queue = service
    proxy = await TcpProxy(BROKER).start()
    proxy.refuse()  # nothing listens on its port yet
    try:
        async with Worker(cwd, "service:app", url=proxy.url) as w:  # waits by default
            await w.wait_for_line("waiting for RabbitMQ at amqp://guest:***@127.0.0.1:")
            await proxy.start()  # the broker is up
            await w.wait_for_line("answers after")
            await w.wait_for_line(f"consuming '{queue}'")
            assert await w.stop() == 0
    finally:
        await proxy.close()


def test_a_broker_that_never_answers_is_the_usual_one_line_error_after_the_wait(module):
    cwd, _ = module
    result = run_cli("worker", "service:app", "--wait-for-broker", "2", cwd=cwd,
                     url="amqp://guest:guest@127.0.0.1:1/")  # fmt: skip
    assert result.returncode == 1, result.stderr
    # Each failed try is logged while the wait lasts (how many fit in 2 s depends on how
    # fast the process started); then the one Error line.
    a_try = " WARNING rabbitq.worker: waiting for RabbitMQ "
    lines = [x for x in result.stderr.strip().splitlines()
             if " INFO " not in x and a_try not in x]  # fmt: skip
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    line = lines[0]
    assert line.startswith("Error: cannot reach RabbitMQ at amqp://guest:***@127.0.0.1:1/")
    assert line.endswith("(waited 2s: --wait-for-broker)")
