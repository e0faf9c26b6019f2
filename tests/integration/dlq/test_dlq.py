"""The DLQ tool against a real broker: reading changes nothing, replay and purge touch
exactly what the filters name, a cut connection loses nothing, files round-trip."""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Iterable
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import aio_pika
import orjson
import pytest
from aio_pika.abc import AbstractIncomingMessage, AbstractRobustConnection
from click.testing import CliRunner, Result

from rabbitq import App, dlq
from rabbitq._amqp import headers as h
from rabbitq.cli import main
from rabbitq.dlq.operations import DEFAULT_WINDOW
from tests.helpers import declare_topology, drain_queue, queue_depth, wait_for
from tests.proxy import TcpProxy


def dead(
    queue: str,
    i: int,
    *,
    type_name: str = "t.a",
    reason: str = "exhausted",
    error: str | None = None,
    failed_at: datetime | None = None,
    body: bytes | None = None,
    extra: dict[str, Any] | None = None,
) -> aio_pika.Message:
    """A DLQ copy as the worker writes it."""
    headers = h.dead_letter_headers(
        extra or {},
        reason=reason,
        error=error or f"ValueError: failure {i}",
        traceback="Traceback (most recent call last):\n  ...\nValueError",
        queue=queue,
        attempt=5,
        exchange="rabbitq",
        routing_key=type_name,
        failed_at=failed_at,
    )
    return aio_pika.Message(
        body if body is not None else orjson.dumps({"n": i}),
        headers=headers,
        message_id=f"m{i:05d}",
        type=type_name,
        content_type="application/json",
        delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
        timestamp=datetime(2024, 5, 1, 10, 0, tzinfo=UTC),
    )


async def fill(
    conn: AbstractRobustConnection, app: App, messages: Iterable[aio_pika.Message]
) -> int:
    """Publish ``messages`` straight into the app's DLQ, each confirmed (a quorum DLQ
    declared a moment before lost unconfirmed ones on RabbitMQ 3.10 under a full parallel
    suite: the depth never reached the count), and wait until the DLQ holds them all."""
    name = app.topology().dlq.name
    expected = await queue_depth(conn, name)
    channel = await conn.channel(publisher_confirms=True)
    for message in messages:  # one at a time: the DLQ's order is the tests' order
        await channel.default_exchange.publish(message, routing_key=name)
        expected += 1
    await channel.close()
    await wait_for(lambda: _depth_is(conn, name, expected))
    return expected


async def _depth_is(conn: AbstractRobustConnection, name: str, n: int) -> bool:
    return await queue_depth(conn, name) == n


async def take_all(conn: AbstractRobustConnection, name: str) -> list[str]:
    """The message ids of everything in queue ``name`` (removed), quickly."""
    total = await queue_depth(conn, name)
    channel = await conn.channel()
    await channel.set_qos(prefetch_count=0)
    queue = await channel.declare_queue(name, passive=True)
    ids: list[str] = []
    done = asyncio.Event()

    async def on_message(message: AbstractIncomingMessage) -> None:
        ids.append(message.message_id or "")
        if len(ids) == total:
            done.set()

    if total:
        await queue.consume(on_message, no_ack=True)
        await asyncio.wait_for(done.wait(), timeout=60)
    await channel.close()
    return ids


async def cli(*args: str, input: str | None = None) -> Result:
    """Run ``rabbitq dlq ARGS`` (in a thread: the command runs its own event loop)."""
    runner = CliRunner(env={"COLUMNS": "200"})  # wide enough that table cells do not wrap
    return await asyncio.to_thread(runner.invoke, main, ["dlq", *args], input=input)


def snapshot(messages: list[dlq.DeadMessage]) -> list[tuple[Any, ...]]:
    """What must survive: body, properties and headers (minus per-delivery counters)."""
    return [
        (
            m.body,
            m.properties,
            {k: v for k, v in m.headers.items() if k != "x-delivery-count"},
        )
        for m in messages
    ]


@pytest.fixture
async def setup(make_app, connection):
    """``setup(**app_kwargs)``: a declared app whose DLQ the test fills."""

    async def make(**kwargs: Any) -> App:
        app = make_app(**kwargs)
        await declare_topology(connection, app)
        return app

    return make


# ------------------------------------------------------------------ reading


@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
async def test_list_and_show_leave_the_dlq_as_it_was(setup, connection, broker_url, queue_type):
    app = await setup(queue_type=queue_type)
    await fill(connection, app, (dead(app.queue, i, type_name=f"t.{i % 3}") for i in range(50)))
    before = await dlq.list_messages(app.queue, url=broker_url)

    listed = await dlq.list_messages(app.queue, url=broker_url, limit=10)
    shown = await dlq.show(app.queue, "m00025", url=broker_url)
    after = await dlq.list_messages(app.queue, url=broker_url)

    assert [m.message_id for m in listed] == [f"m{i:05d}" for i in range(10)]
    assert [m.message_id for m in shown] == ["m00025"]
    assert [m.message_id for m in after] == [f"m{i:05d}" for i in range(50)]  # same order
    assert snapshot(after) == snapshot(before)  # same content
    assert await queue_depth(connection, app.topology().dlq.name) == 50
    # a quorum DLQ has no delivery limit: the reads dead-lettered nothing anywhere
    assert await queue_depth(connection, app.queue) == 0


async def test_a_message_the_broker_dead_lettered_shows_broker_reason_and_replays_home(
    setup, connection, broker_url
):
    app = await setup()
    channel = await connection.channel()
    await channel.default_exchange.publish(
        aio_pika.Message(b"raw", message_id="from-elsewhere"), routing_key=app.queue
    )
    queue = await channel.declare_queue(app.queue, passive=True)
    message = await queue.get(no_ack=False)
    await message.reject(requeue=False)  # the broker dead-letters it to the DLQ
    await channel.close()
    # a quorum queue dead-letters at-least-once, in its own time
    await wait_for(lambda: _depth_is(connection, app.topology().dlq.name, 1))

    (m,) = await dlq.list_messages(app.queue, url=broker_url)
    assert m.reason == "broker:rejected"
    assert m.origin == app.queue

    tally = await dlq.replay(
        app.queue, url=broker_url, filters=dlq.Filters.build(reasons=["broker:rejected"])
    )
    assert tally.done == 1
    (back,) = await drain_queue(connection, app.queue)
    assert back.body == b"raw" and back.message_id == "from-elsewhere"


# ------------------------------------------------------------------ replay


async def test_a_replayed_copy_has_fresh_attempts_and_everything_else_unchanged(
    setup, connection, broker_url
):
    app = await setup()
    await fill(connection, app, [dead(app.queue, 1, extra={"tenant": "acme"})])
    (original,) = await dlq.list_messages(app.queue, url=broker_url)

    tally = await dlq.replay(app.queue, url=broker_url)

    assert (tally.done, tally.failed, tally.possible_duplicates) == (1, 0, 0)
    (copy,) = await drain_queue(connection, app.queue)
    assert copy.body == original.body
    for name in ("message_id", "type", "content_type", "timestamp", "correlation_id"):
        assert getattr(copy, name) == original.properties.get(name), name
    assert copy.delivery_mode == aio_pika.DeliveryMode.PERSISTENT
    assert copy.headers[h.REPLAYED] == 1
    assert h.ATTEMPT not in copy.headers
    assert not set(h.DLQ_ONLY) & set(copy.headers)
    assert copy.headers["tenant"] == "acme"
    assert copy.headers[h.ORIGINAL_ROUTING_KEY] == "t.a"
    assert await queue_depth(connection, app.topology().dlq.name) == 0


async def test_replay_to_a_queue_that_does_not_exist_leaves_the_message_in_the_dlq(
    setup, connection, broker_url
):
    app = await setup()
    await fill(connection, app, (dead(app.queue, i) for i in range(3)))

    tally = await dlq.replay(app.queue, url=broker_url, to=f"{app.queue}.nowhere")

    assert (tally.done, tally.failed) == (0, 3)
    assert list(tally.failures) == [f"queue '{app.queue}.nowhere' does not exist"]
    assert [m.message_id for m in await dlq.list_messages(app.queue, url=broker_url)] == [
        "m00000",
        "m00001",
        "m00002",
    ]


async def test_filters_select_exactly_what_they_name_for_replay_and_purge(
    setup, connection, broker_url
):
    app = await setup()
    early = datetime(2024, 5, 1, tzinfo=UTC)
    late = datetime(2024, 6, 1, tzinfo=UTC)
    await fill(
        connection,
        app,
        (
            dead(
                app.queue,
                i,
                type_name="email.send" if i % 2 else "sms.send",
                reason="permanent" if i % 3 == 0 else "exhausted",
                error="SMTPError: 550 mailbox full" if i % 4 == 0 else "TimeoutError: slow",
                failed_at=early if i < 10 else late,
            )
            for i in range(20)
        ),
    )
    everything = {f"m{i:05d}" for i in range(20)}

    replayed = await dlq.replay(
        app.queue,
        url=broker_url,
        filters=dlq.Filters.build(types=["email.send"], reasons=["exhausted"], since="2024-05-15"),
    )
    moved = {m.message_id for m in await drain_queue(connection, app.queue)}
    expected = {f"m{i:05d}" for i in range(10, 20) if i % 2 and i % 3}
    assert moved == expected and replayed.done == len(expected)

    purged = await dlq.purge(
        app.queue, url=broker_url, filters=dlq.Filters.build(grep=r"^SMTPError: 550")
    )
    gone = {f"m{i:05d}" for i in range(20) if i % 4 == 0} - expected
    assert purged.done == len(gone)

    left = [m.message_id for m in await dlq.list_messages(app.queue, url=broker_url)]
    assert left == sorted(everything - expected - gone)  # the rest, still in order

    ids = await dlq.purge(
        app.queue, url=broker_url, filters=dlq.Filters.build(message_ids=["m00001", "m00003"])
    )
    assert ids.done == 2
    assert [m.message_id for m in await dlq.list_messages(app.queue, url=broker_url)] == [
        i for i in left if i not in ("m00001", "m00003")
    ]


# Its own bounds (90 s to half-way, 60 s for the cut run, then a second replay of 10,000)
# add up past the default 120 s on a loaded 2-core machine (timed out once there).
@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_a_replay_cut_half_way_then_run_again_loses_nothing_and_reports_duplicates(
    setup, connection, broker_url
):
    n = 10_000
    app = await setup()
    dlq_name = app.topology().dlq.name
    await fill(connection, app, (dead(app.queue, i) for i in range(n)))
    proxy = await TcpProxy(broker_url).start()
    via_proxy = proxy.url

    # the command runs in a thread; this loop runs the proxy and cuts it half-way
    command = asyncio.create_task(cli("replay", app.queue, "--json", "--url", via_proxy))
    try:
        # (the DLQ's ready count says nothing: the reader holds its messages unacked)
        await wait_for(
            lambda: _depth_at_least(connection, app.queue, n // 2), timeout=90, interval=0.02
        )
    finally:
        proxy.cut()
        first = await asyncio.wait_for(command, timeout=60)  # never leave it running
        await proxy.close()
    assert first.exit_code == 1, first.output
    # --json: one document, the error with what the cut run did (docs/cli.md, JSON output)
    document = next(orjson.loads(line) for line in first.output.splitlines() if line[:1] == "{")
    assert document["exit_code"] == 1 and "closed during replay" in document["error"]
    summary = document["tally"]
    error = first.output.splitlines()[-1]
    assert error.startswith("Error: the connection to amqp://guest:***@127.0.0.1:")
    assert "closed during replay" in error
    assert f"{summary['possible_duplicates']} possible duplicate(s)" in error
    assert 0 < summary["done"] < n and summary["possible_duplicates"] > 0
    # bounded by what can be in flight: the confirm window plus the acks not yet proven
    assert summary["possible_duplicates"] <= 2 * DEFAULT_WINDOW

    # the broker lets go of the cut run's unacked messages once it sees the connection
    # gone (at once here; after a heartbeat timeout on a real network fault)
    await wait_for(lambda: _no_consumers(connection, dlq_name))
    second = await cli("replay", app.queue, "--json", "--url", broker_url)
    assert second.exit_code == 0, second.output
    assert orjson.loads(second.output.splitlines()[-1])["possible_duplicates"] == 0

    ids = await take_all(connection, app.queue)
    assert set(ids) == {f"m{i:05d}" for i in range(n)}  # every message is back
    duplicates = len(ids) - len(set(ids))
    assert duplicates <= summary["possible_duplicates"]  # the report covered every double
    assert await queue_depth(connection, dlq_name) == 0


async def _no_consumers(conn: AbstractRobustConnection, name: str) -> bool:
    channel = await conn.channel()
    queue = await channel.declare_queue(name, passive=True)
    await channel.close()
    return queue.declaration_result.consumer_count == 0


async def _depth_at_least(conn: AbstractRobustConnection, name: str, n: int) -> bool:
    return await queue_depth(conn, name) >= n


async def test_two_replays_of_the_same_dlq_at_once_lose_nothing(setup, connection, broker_url):
    n = 2000
    app = await setup()
    await fill(connection, app, (dead(app.queue, i) for i in range(n)))

    a, b = await asyncio.gather(
        dlq.replay(app.queue, url=broker_url), dlq.replay(app.queue, url=broker_url)
    )

    assert a.done + b.done == n
    ids = await take_all(connection, app.queue)
    assert sorted(ids) == [f"m{i:05d}" for i in range(n)]
    assert await queue_depth(connection, app.topology().dlq.name) == 0


# ------------------------------------------------------------------ export, import


async def test_export_purge_import_round_trips_byte_for_byte(
    setup, connection, broker_url, tmp_path: Path
):
    app = await setup()
    awkward = {
        "raw": bytearray(b"\x00\xff\x10"),
        "nested": {"list": [1, "two", 3.5, Decimal("1.25"), {"$looks": "like a tag"}]},
        "when": datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC),
        "flag": True,
        "none": None,
        "big": 2**40,
    }
    await fill(
        connection,
        app,
        [
            dead(app.queue, 0, extra=awkward),
            dead(app.queue, 1, body=bytes(range(256))),
            dead(app.queue, 2, body=b""),
            dead(app.queue, 3, body="héllo \x1b[31m".encode()),
        ],
    )
    before = await dlq.list_messages(app.queue, url=broker_url)
    path = tmp_path / "dlq.jsonl"

    exported = await dlq.export(app.queue, path, url=broker_url)
    purged = await dlq.purge(app.queue, url=broker_url)
    imported = await dlq.import_messages(app.queue, path, url=broker_url)

    assert (exported.done, purged.done, imported.done) == (4, 4, 4)
    after = await dlq.list_messages(app.queue, url=broker_url)
    assert snapshot(after) == snapshot(before)


async def test_export_with_delete_empties_the_dlq_only_into_the_file(
    setup, connection, broker_url, tmp_path: Path
):
    app = await setup()
    await fill(connection, app, (dead(app.queue, i) for i in range(1200)))
    path = tmp_path / "out.jsonl"

    tally = await dlq.export(app.queue, path, url=broker_url, delete=True)

    assert tally.done == 1200
    assert await queue_depth(connection, app.topology().dlq.name) == 0
    records = dlq.read_file(path)
    assert [r.properties["message_id"] for r in records] == [f"m{i:05d}" for i in range(1200)]


async def test_import_with_replay_sends_messages_home(setup, connection, broker_url, tmp_path):
    app = await setup()
    await fill(connection, app, (dead(app.queue, i) for i in range(3)))
    path = tmp_path / "x.jsonl"
    await dlq.export(app.queue, path, url=broker_url, delete=True)

    tally = await dlq.import_messages(app.queue, path, url=broker_url, replay=True)

    assert tally.done == 3
    home = await drain_queue(connection, app.queue)
    assert [m.headers[h.REPLAYED] for m in home] == [1, 1, 1]


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (b"{not json\n", ":2: not valid JSON"),
        (b'{"hello": "world"}\n', ":2: not a rabbitq DLQ export line"),
        (
            b'{"format": "rabbitq-dlq", "version": 1, "properties": {}}\n',
            ":2: missing field 'body'",
        ),
    ],
)
async def test_a_bad_line_stops_the_import_before_anything_is_published(
    setup, connection, broker_url, tmp_path, line, expected
):
    app = await setup()
    await fill(connection, app, [dead(app.queue, 0)])
    good = tmp_path / "good.jsonl"
    await dlq.export(app.queue, good, url=broker_url)
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(good.read_bytes() + line + good.read_bytes())

    result = await cli("import", app.queue, str(bad), "--url", broker_url)

    assert result.exit_code == 1
    assert result.output.count("\n") == 1 and expected in result.output, result.output
    assert await queue_depth(connection, app.topology().dlq.name) == 1  # nothing published


async def test_an_unknown_queue_is_one_line_naming_it_for_every_command(broker_url, uid, tmp_path):
    queue = f"t.{uid}.missing"
    for args in (
        ["list", queue],
        ["show", queue, "x"],
        ["replay", queue],
        ["export", queue, str(tmp_path / "e.jsonl")],
        ["purge", queue, "--yes"],
    ):
        result = await cli(*args, "--url", broker_url)
        assert result.exit_code == 1, args
        assert result.output.count("\n") == 1, result.output
        assert f"queue '{queue}.dlq' does not exist" in result.output
        assert "guest:guest" not in result.output


async def test_an_unreachable_broker_is_one_line_without_the_password():
    result = await cli("list", "emails", "--url", "amqp://user:s3cretpw@127.0.0.1:1/")
    assert result.exit_code == 1
    assert result.output.count("\n") == 1 and "cannot reach RabbitMQ" in result.output
    assert "s3cretpw" not in result.output


# ------------------------------------------------------------------ the CLI


async def test_purge_without_yes_off_a_terminal_refuses_and_deletes_nothing(
    setup, connection, broker_url
):
    app = await setup()
    await fill(connection, app, (dead(app.queue, i) for i in range(3)))

    result = await cli("purge", app.queue, "--url", broker_url)

    assert result.exit_code == 2 and "without --yes" in result.output  # bad usage
    assert await queue_depth(connection, app.topology().dlq.name) == 3


async def test_cli_list_show_replay_and_purge(setup, connection, broker_url):
    app = await setup()
    await fill(
        connection,
        app,
        [
            dead(app.queue, 0, body=b"\x1b[2J\x1b]0;pwned\x07 [bold]x[/bold]", type_name="t.x"),
            dead(app.queue, 1, error="E: \x1b[31mred\r", type_name="t.y"),
            dead(app.queue, 2, type_name="t.y"),
        ],
    )

    async def run(*args: str) -> str:
        result = await cli(*args, "--url", broker_url)
        assert result.exit_code == 0, result.output
        assert "\x1b" not in result.output and "\r" not in result.output
        return result.output

    rows = orjson.loads(await run("list", app.queue, "--json"))  # one document: an array
    assert [r["message_id"] for r in rows] == ["m00000", "m00001", "m00002"]
    assert rows[1]["reason"] == "exhausted" and rows[1]["queue"] == app.queue

    shown = await run("show", app.queue, "m00000")
    assert "\\x1b[2J" in shown and "[bold]x[/bold]" in shown  # escaped, markup not applied
    assert "E: \\x1b[31mred\\r" in await run("list", app.queue)

    assert "would move 2" in await run("replay", app.queue, "--type", "t.y", "--dry-run")
    assert await queue_depth(connection, app.queue) == 0

    replayed = await run("replay", app.queue, "--type", "t.y", "--json")
    summary = orjson.loads(replayed.splitlines()[-1])
    assert (summary["done"], summary["skipped"], summary["possible_duplicates"]) == (2, 1, 0)

    out = await run("purge", app.queue, "--yes", "--message-id", "m00000")
    assert "deleted 1" in out and "only messages matching message_id m00000" in out
    assert await queue_depth(connection, app.topology().dlq.name) == 0


async def test_purge_on_a_terminal_asks_first_and_deletes_only_what_it_counted(
    setup, connection, broker_url, monkeypatch
):
    # The module, not the ``dlq`` group that rabbitq.cli re-exports under that name.
    cli_dlq = importlib.import_module("rabbitq.cli.dlq")
    monkeypatch.setattr(cli_dlq, "_interactive", lambda: True)
    app = await setup()
    await fill(
        connection,
        app,
        (dead(app.queue, i, reason="invalid" if i < 2 else "exhausted") for i in range(5)),
    )
    args = ("purge", app.queue, "--reason", "invalid", "--url", broker_url)

    declined = await cli(*args, input="n\n")
    assert (
        declined.exit_code == 1 and "Delete 2 message(s) matching reason invalid" in declined.output
    )
    assert "the other 3 stay" in declined.output
    # All five are back, none deleted. The preview read them without acking and closed
    # its channel; a quorum DLQ counts them as ready again only once its leader has
    # processed that consumer's end, a moment after the command returned (seen: 0).
    await wait_for(lambda: _depth_is(connection, app.topology().dlq.name, 5), timeout=10)

    accepted = await cli(*args, input="y\n")
    assert accepted.exit_code == 0 and "deleted 2" in accepted.output
    left = [m.message_id for m in await dlq.list_messages(app.queue, url=broker_url)]
    assert left == ["m00002", "m00003", "m00004"]


async def test_import_with_replay_to_a_missing_queue_publishes_nothing(
    setup, connection, broker_url, tmp_path
):
    app = await setup()
    await fill(connection, app, (dead(app.queue, i) for i in range(2)))
    path = tmp_path / "x.jsonl"
    await dlq.export(app.queue, path, url=broker_url)

    result = await cli(
        "import", app.queue, str(path), "--replay", "--to", f"{app.queue}.gone", "--url", broker_url
    )

    assert result.exit_code == 1 and result.output.count("\n") == 1
    assert f"queue '{app.queue}.gone' does not exist" in result.output
    assert "nothing was imported" in result.output
    assert await queue_depth(connection, app.topology().dlq.name) == 2
    assert await queue_depth(connection, app.queue) == 0
