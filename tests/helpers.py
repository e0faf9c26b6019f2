"""Helpers shared by the tests: run a worker, record outcomes, inspect queues, run the
``rabbitq`` command as a real subprocess, read its one-line errors, say why a worker
subprocess died, ask a broker for the consistent-hash exchange."""

from __future__ import annotations

import ast
import asyncio
import concurrent.futures
import contextlib
import inspect
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from aio_pika.abc import AbstractIncomingMessage, AbstractRobustConnection
from click.testing import Result

from rabbitq import App, Worker
from rabbitq._amqp import partitions
from rabbitq._amqp.topology import retry_queue_name
from rabbitq.hooks import Hooks

from .failure_kinds import SettleTimeout

REDIS_URL = os.environ.get("RABBITQ_TEST_REDIS", "redis://127.0.0.1:6379/0")
"""The real Redis of the tests (the effects tests and bench/ read the same variable)."""
ROOT = Path(__file__).resolve().parents[1]
"""The repository (examples/ is importable from there)."""
CONSISTENT_HASH_PLUGIN = partitions.PLUGIN
"""``rabbitmq_consistent_hash_exchange``: what ``App(partitions=N)`` needs on the broker."""
ENABLE_CONSISTENT_HASH = partitions.ENABLE
"""``rabbitmq-plugins enable rabbitmq_consistent_hash_exchange``."""


def run_cli(
    *args: str,
    url: str | None = None,
    env: Mapping[str, str] | None = None,
    columns: int | None = None,
    cwd: str | Path | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """``python -m rabbitq ARGS`` as a real subprocess (stdout a pipe, not a TTY;
    ``NO_COLOR``): the one way the tests run the ``rabbitq`` command against a broker or
    without one. ``RABBITQ_URL`` is set to ``url`` or unset; ``COLUMNS`` is ``columns`` or
    unset (a terminal's width never leaks in); ``env`` is added last; it runs in ``cwd``
    (default: the repository, where examples/ is importable)."""
    full = {k: v for k, v in os.environ.items() if k not in ("RABBITQ_URL", "COLUMNS")}
    full["NO_COLOR"] = "1"
    if url is not None:
        full["RABBITQ_URL"] = url
    if columns is not None:
        full["COLUMNS"] = str(columns)
    full.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "rabbitq", *args],
        cwd=cwd or ROOT,
        env=full,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


async def run_cli_async(*args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """:func:`run_cli` in a thread, for async tests."""
    return await asyncio.to_thread(run_cli, *args, **kwargs)


def one_line_error(output: str) -> str:
    """The single ``Error: ...`` line a failed command printed (INFO log lines aside),
    with no traceback."""
    # A worker logs that it is connecting (INFO) before it can fail to.
    lines = [line for line in output.strip().splitlines() if " INFO " not in line]
    assert len(lines) == 1, output
    assert lines[0].startswith("Error: "), output
    assert "Traceback" not in output
    return lines[0]


def assert_one_line_error(
    result: subprocess.CompletedProcess[str] | Result, exit_code: int = 1
) -> str:
    """The command failed with ``exit_code`` and said why in one ``Error:`` line (on its
    stderr when it ran as a subprocess, :func:`run_cli`; in its output under click's
    ``CliRunner``); that line."""
    if isinstance(result, subprocess.CompletedProcess):
        code, output = result.returncode, result.stderr
    else:
        code, output = result.exit_code, result.output
    assert code == exit_code, output
    return one_line_error(output)


@contextlib.asynccontextmanager
async def redis_key_prefix() -> AsyncIterator[str]:
    """A key prefix of the caller's own in the real Redis; its keys are deleted after."""
    import redis.asyncio as aioredis

    name = f"rabbitq-test:{uuid.uuid4().hex}:"
    yield name
    client = aioredis.Redis.from_url(REDIS_URL)
    keys = [k async for k in client.scan_iter(match=name + "*")]
    if keys:
        await client.delete(*keys)
    await client.aclose()


DELETED_QUEUES: set[str] = set()
"""Every queue :func:`delete_app_objects` deleted in this process: delayed messages or
retries still in the delay ladder for them end in ``rabbitq.delay.undeliverable``
(docs/delays.md, "A queue deleted while its messages wait"), which
:func:`purge_undeliverable` clears of them at the end of the session."""


async def purge_undeliverable(url: str, queues: set[str], *, cap: int = 100_000) -> int:
    """Remove from the delay ladder's catch-all the messages delayed for ``queues`` (this
    session's own deleted queues, unique names) and nothing else: every other message is
    put back. Returns how many were removed (0 if the catch-all does not exist)."""
    import aio_pika
    import aiormq

    from rabbitq.ladder.plan import DELAY_TO, UNDELIVERABLE

    if not queues:
        return 0
    connection = await aio_pika.connect(url)
    try:
        channel = await connection.channel()
        try:
            catch_all = await channel.declare_queue(UNDELIVERABLE, passive=True)
        except aiormq.exceptions.ChannelNotFoundEntity:
            return 0
        there = min(cap, catch_all.declaration_result.message_count or 0)
        removed, others = 0, []
        for _ in range(there):  # held unacked until the end, so each is seen once
            msg = await catch_all.get(fail=False, no_ack=False)
            if msg is None:
                break
            if (msg.headers or {}).get(DELAY_TO) in queues:
                await msg.ack()
                removed += 1
            else:
                others.append(msg)
        for msg in others:
            await msg.nack(requeue=True)
        return removed
    finally:
        await connection.close()


async def delete_app_objects(conn: AbstractRobustConnection, app: App) -> None:
    """Delete every queue of ``app`` and its exchange (unless it is the shared default).

    Besides the queues its handlers use, the retry queues of the app's own policy: a
    test may have declared them another way (an older topology, a CLI in another
    process), and the shared broker should not keep them.
    """
    channel = await conn.channel()
    names = [spec.name for spec in app.topology().queues]
    names += [retry_queue_name(app.queue, ms) for ms in app.retry.delays_ms]
    DELETED_QUEUES.update(names)
    for name in dict.fromkeys(names):
        with contextlib.suppress(Exception):
            await channel.queue_delete(name)
    if app.exchange != "rabbitq":
        with contextlib.suppress(Exception):
            await channel.exchange_delete(app.exchange)
    with contextlib.suppress(Exception):
        await channel.close()


@contextlib.asynccontextmanager
async def running(worker: Worker) -> AsyncIterator[Worker]:
    """Run ``worker`` in a task for the duration of the block, then drain and stop it."""
    task = asyncio.create_task(worker.run())
    ready = asyncio.create_task(worker.ready.wait())
    done, _ = await asyncio.wait({task, ready}, return_when=asyncio.FIRST_COMPLETED, timeout=30)
    if task in done:
        ready.cancel()
        task.result()  # raises the start-up error
    assert ready in done, "worker did not become ready within 30 s"
    try:
        yield worker
    finally:
        worker.stop()
        await asyncio.wait_for(task, timeout=60)


class Recorder(Hooks):
    """Hooks that record every outcome, for assertions."""

    def __init__(self) -> None:
        self.events: list[tuple[str, ...]] = []

    def succeeded(self, queue: str, type_name: str, duration: float) -> None:
        self.events.append(("succeeded", type_name))

    def retried(self, queue: str, type_name: str, delay: str, duration: float) -> None:
        self.events.append(("retried", type_name, delay))

    def dead_lettered(self, queue: str, type_name: str, reason: str, duration: float) -> None:
        self.events.append(("dead_lettered", type_name, reason))

    def requeued(self, queue: str, type_name: str) -> None:
        self.events.append(("requeued", type_name))

    def count(self, kind: str) -> int:
        return sum(1 for e in self.events if e[0] == kind)


async def drain_queue(
    conn: AbstractRobustConnection, queue: str, *, ack: bool = True
) -> list[AbstractIncomingMessage]:
    """Every message now in ``queue`` (acked, so removed, unless ``ack=False``)."""
    channel = await conn.channel()
    q = await channel.declare_queue(queue, passive=True)
    out: list[AbstractIncomingMessage] = []
    while (msg := await q.get(fail=False, no_ack=False)) is not None:
        out.append(msg)
    for msg in out:
        if ack:
            await msg.ack()
        else:
            await msg.nack(requeue=True)
    await channel.close()
    return out


def described(predicate: Callable[[], Any]) -> str:
    """What a wait's ``predicate`` awaits, for its :class:`SettleTimeout`: a lambda's
    source (``lambda: rec.count("success") == 5``), else the function's name."""
    name = getattr(predicate, "__qualname__", repr(predicate))
    if name.rsplit(".", 1)[-1] != "<lambda>":
        return name
    with contextlib.suppress(OSError, TypeError):
        source = " ".join(inspect.getsource(predicate).split())
        text = source[source.find("lambda") :][:300]
        for end in range(len(text), 6, -1):  # the longest prefix that is the lambda alone
            with contextlib.suppress(SyntaxError):
                if isinstance(ast.parse(text[:end], mode="eval").body, ast.Lambda):
                    return text[:end]
    return name


async def wait_for(
    predicate: Callable[[], Any],
    timeout: float = 30,
    interval: float = 0.05,
    *,
    running: Iterable[tuple[subprocess.Popen[Any], Path]] = (),
    what: str | None = None,
) -> None:
    """Poll ``predicate`` (sync or async) until it is true, else raise
    :class:`SettleTimeout` (timing under load, in the run's last lines) after
    ``timeout``; ``what`` names what was awaited (else the predicate's source).
    ``running``: ``(process, log)`` pairs that must stay up meanwhile; one that exits
    fails the wait at once with :func:`exit_report` (why it died, not a timeout)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    watched = list(running)
    while True:
        for proc, log in watched:
            assert_running(proc, log)
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return
        if loop.time() > deadline:
            raise SettleTimeout(what or described(predicate), timeout)
        await asyncio.sleep(interval)


def window_spans(times: list[float], starts: int) -> list[float]:
    """How long each run of ``starts`` consecutive start times lasts, shortest first: a
    sliding window, not calendar seconds (with a rate of N a second, every N + 1 starts
    take at least a second, however they straddle a second's boundary)."""
    s = sorted(times)
    assert len(s) >= starts, f"only {len(s)} start times"
    return sorted(b - a for a, b in zip(s, s[starts - 1 :], strict=False))


async def queue_depth(conn: AbstractRobustConnection, queue: str) -> int:
    """Messages ready in ``queue`` (passive declare)."""
    channel = await conn.channel()
    q = await channel.declare_queue(queue, passive=True)
    depth = q.declaration_result.message_count or 0
    await channel.close()
    return depth


async def declare_topology(conn: AbstractRobustConnection, app: App) -> None:
    """Declare ``app``'s exchange, queues and bindings without running a worker, so that
    messages can be published (and left waiting) before a worker starts."""
    from rabbitq._amqp.topology import declare

    channel = await conn.channel()
    await declare(channel, app.topology())
    await channel.close()


async def publish_bare(
    url: str,
    exchange: str,
    routing_key: str,
    body: bytes,
    *,
    _patch: Callable[[bytes], bytes] | None = None,
    **properties: Any,
) -> None:
    """Publish one message as a producer in another language might: a minimal AMQP 0-9-1
    client over a raw socket, with exactly the given ``properties`` and nothing else.

    aio-pika (aiormq) always fills in a ``message_id``; this does not, so tests can send
    what other producers send. Waits for the publisher confirm; fails if unroutable.
    The body goes in one frame, so keep it under the broker's ``frame_max`` (128 KiB).
    ``_patch`` rewrites the marshalled content header frame, to send bytes that no
    well-behaved encoder would produce (poison-input tests).
    """
    from urllib.parse import unquote, urlsplit

    from pamqp import commands, frame, header
    from pamqp import exceptions as pamqp_errors
    from pamqp.body import ContentBody
    from pamqp.heartbeat import Heartbeat

    if "type" in properties:  # pamqp's name for the ``type`` property
        properties["message_type"] = properties.pop("type")
    parts = urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port or 5672)
    buffer = b""

    async def expect(kind: type) -> Any:
        nonlocal buffer
        while True:
            try:
                consumed, _channel, value = frame.unmarshal(buffer)
            except pamqp_errors.UnmarshalingException:
                data = await asyncio.wait_for(reader.read(65536), timeout=10)
                if not data:
                    raise ConnectionError("the broker closed the connection") from None
                buffer += data
                continue
            buffer = buffer[consumed:]
            if isinstance(value, Heartbeat):
                continue
            if not isinstance(value, kind):
                raise AssertionError(
                    f"expected {kind.__name__}, the broker sent {value!r}"
                    + getattr(value, "reply_text", "")
                )
            return value

    def send(channel: int, *values: Any) -> None:
        for value in values:
            writer.write(frame.marshal(value, channel))

    try:
        writer.write(header.ProtocolHeader().marshal())
        await expect(commands.Connection.Start)
        user, password = unquote(parts.username or "guest"), unquote(parts.password or "guest")
        send(0, commands.Connection.StartOk(response=f"\0{user}\0{password}"))
        tune = await expect(commands.Connection.Tune)
        send(0, commands.Connection.TuneOk(channel_max=1, frame_max=tune.frame_max, heartbeat=0))
        send(0, commands.Connection.Open(virtual_host=unquote(parts.path[1:]) or "/"))
        await expect(commands.Connection.OpenOk)
        send(1, commands.Channel.Open())
        await expect(commands.Channel.OpenOk)
        send(1, commands.Confirm.Select())
        await expect(commands.Confirm.SelectOk)
        content = frame.marshal(
            header.ContentHeader(0, len(body), commands.Basic.Properties(**properties)), 1
        )
        if _patch is not None:
            patched = _patch(content[7:-1])  # the payload, between frame header and end
            content = content[:3] + len(patched).to_bytes(4, "big") + patched + content[-1:]
        send(1, commands.Basic.Publish(exchange=exchange, routing_key=routing_key, mandatory=True))
        writer.write(content)
        if body:  # an empty body has no body frame (AMQP 0-9-1, 4.2.6.2)
            send(1, ContentBody(body))
        await expect(commands.Basic.Ack)  # a Basic.Return (unroutable) fails here
        send(0, commands.Connection.Close(reply_code=200, reply_text="", class_id=0, method_id=0))
        await expect(commands.Connection.CloseOk)
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


def service_fixture(function: Callable[..., Any]) -> Callable[..., Any]:
    """Says that a fixture reaches a service (RabbitMQ, PostgreSQL, Redis): every test
    using it, directly or through another fixture, is marked ``services`` by
    tests/conftest.py. Written under ``@pytest.fixture``."""
    function.reaches_service = True  # type: ignore[attr-defined]
    return function


def output_tail(log: Path | str, lines: int = 20) -> str:
    """The last ``lines`` non-blank lines of a subprocess's output file (``""``: none)."""
    try:
        text = Path(log).read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join([line for line in text.splitlines() if line.strip()][-lines:])


def exit_report(
    proc: subprocess.Popen[Any], log: Path | str, what: str = "the worker", lines: int = 20
) -> str:
    """Why a subprocess stopped, for an assertion message: ``<what> (pid N) exited with
    CODE: <its last line>`` (pytest's one-line summary shows this much), then the last
    ``lines`` lines of ``log``, the file its stdout and stderr went to."""
    tail = output_tail(log, lines)
    last = tail.splitlines()[-1] if tail else f"(nothing in {log})"
    head = f"{what} (pid {proc.pid}) exited with {proc.returncode}: {last}"
    return f"{head}\n--- last lines of {log} ---\n{tail}" if tail else head


def assert_running(proc: subprocess.Popen[Any], log: Path | str, what: str = "the worker") -> None:
    """Fail with :func:`exit_report` if ``proc`` has exited."""
    if proc.poll() is not None:
        raise AssertionError(exit_report(proc, log, what))


STOPPED_BY_THE_TEST = frozenset({0, -signal.SIGKILL, -signal.SIGTERM})
"""Exit codes of a worker that a test killed or stopped (or that stopped cleanly)."""


def unexpected_exits(
    procs: Iterable[tuple[subprocess.Popen[Any], Path]],
    what: str = "a worker",
    expected: frozenset[int] = STOPPED_BY_THE_TEST,
) -> str:
    """:func:`exit_report` of every process that exited with a code not in ``expected``
    (``""``: none), for the message of a run that did not finish: why its workers died."""
    reports = [
        exit_report(proc, log, what)
        for proc, log in procs
        if proc.poll() is not None and proc.returncode not in expected
    ]
    return "\n".join(reports)


def spawn_logged(args: list[str], log: Path, **popen: Any) -> subprocess.Popen[bytes]:
    """``subprocess.Popen(args)`` with its stdout and stderr appended to ``log``, so that
    :func:`exit_report` can say why it died (``popen``: ``cwd``, ``env``, ...)."""
    with log.open("ab") as out:
        return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, **popen)


def broker_has_consistent_hash(url: str) -> bool:
    """Whether the broker at ``url`` has the consistent-hash exchange type (its plugin
    enabled): an ``x-consistent-hash`` exchange declared and deleted on a connection of
    its own (a refused declare closes that connection only). Blocking."""

    async def probe() -> bool:
        import aio_pika

        connection = await aio_pika.connect(url, timeout=15)
        try:
            return await partitions.probe(connection) is None
        finally:
            with contextlib.suppress(Exception):
                await connection.close()

    # A thread of its own: a fixture may be set up while an event loop runs.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, probe()).result()
