"""What a new user hits in ``rabbitq dlq`` (issue 12, items 5, 6 and 9), through the real
command as a subprocess: duplicate message ids, ids at 80 columns, id prefixes, and
unknown reasons."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import aio_pika
import orjson
import pytest
from aio_pika.abc import AbstractRobustConnection

from rabbitq._amqp import headers as h
from tests.helpers import run_cli_async

pytestmark = pytest.mark.broker


def dead(
    queue: str, message_id: str, *, type_name: str = "email.send", n: int = 0,
    reason: str = "exhausted",
):  # fmt: skip
    headers = h.dead_letter_headers(
        {},
        reason=reason,
        error="TimeoutError: smtp timed out after 30 s while talking to mail.example.com",
        traceback="Traceback (most recent call last):\n  ...\nTimeoutError",
        queue=queue,
        attempt=5,
        exchange="rabbitq",
        routing_key=type_name,
        failed_at=datetime(2024, 5, 1, 9, 12, 3, tzinfo=UTC),
    )
    return aio_pika.Message(
        orjson.dumps({"n": n}),
        headers=headers,
        message_id=message_id,
        type=type_name,
        content_type="application/json",
        delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
    )


@pytest.fixture
async def queue(connection: AbstractRobustConnection, uid: str) -> AsyncIterator[str]:
    """A service queue and its DLQ, both empty, deleted afterwards."""
    name = f"t.{uid}.dlqfh"
    channel = await connection.channel()
    await channel.declare_queue(name, durable=True)
    await channel.declare_queue(f"{name}.dlq", durable=True)
    try:
        yield name
    finally:
        for q in (name, f"{name}.dlq"):
            await channel.queue_delete(q)
        await channel.close()


async def fill(connection: AbstractRobustConnection, queue: str, *messages: aio_pika.Message):
    channel = await connection.channel(publisher_confirms=True)
    for message in messages:
        await channel.default_exchange.publish(message, routing_key=f"{queue}.dlq")
    await channel.close()


async def depth(connection: AbstractRobustConnection, name: str) -> int:
    channel = await connection.channel()
    try:
        q = await channel.declare_queue(name, passive=True)
        return q.declaration_result.message_count or 0
    finally:
        await channel.close()


# -- item 5: the same message_id twice is two messages --------------------------------


@pytest.mark.parametrize("select", [[], ["--message-id", "order-42"]], ids=["all", "by-id"])
async def test_replay_moves_both_messages_that_share_a_message_id_as_its_dry_run_said(
    broker_url, connection, queue, select
):
    await fill(connection, queue, dead(queue, "order-42", n=1), dead(queue, "order-42", n=2))

    dry = await run_cli_async(
        "dlq", "replay", queue, *select, "--dry-run", "--json", url=broker_url, columns=80
    )
    assert dry.returncode == 0, dry.stderr
    dry_tally = orjson.loads(dry.stdout)  # one document: the tally and what matched
    assert (dry_tally["done"], dry_tally["skipped"]) == (2, 0)

    real = await run_cli_async(
        "dlq", "replay", queue, *select, "--json", url=broker_url, columns=80
    )
    assert real.returncode == 0, real.stderr
    tally = orjson.loads(real.stdout)
    assert (tally["done"], tally["skipped"]) == (dry_tally["done"], dry_tally["skipped"])
    assert await depth(connection, f"{queue}.dlq") == 0
    assert await depth(connection, queue) == 2


# -- item 6: ids can be copied from the list, and a prefix is enough ----------------


async def test_list_at_80_columns_never_wraps_or_cuts_an_id_or_a_type(
    broker_url, connection, queue
):
    ids = [uuid.uuid4().hex for _ in range(3)]
    await fill(
        connection,
        queue,
        *(
            dead(queue, mid, type_name=t)
            for mid, t in zip(ids, ["email.send", "payment.capture", "x"], strict=True)
        ),
    )
    result = await run_cli_async("dlq", "list", queue, url=broker_url, columns=80)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, result.stdout
    for mid in ids:
        assert sum(mid in line for line in lines) == 1, result.stdout
    for type_name in ("email.send", "payment.capture"):
        assert any(type_name in line for line in lines), result.stdout


async def test_show_accepts_a_unique_prefix_of_the_id(broker_url, connection, queue):
    await fill(connection, queue, dead(queue, "4f1c0e9d2b6a4e0c8f7a1b2c3d4e5f60"))
    result = await run_cli_async(
        "dlq", "show", queue, "4f1c0e", "--json", url=broker_url, columns=80
    )
    assert result.returncode == 0, result.stderr
    (shown,) = orjson.loads(result.stdout)  # an array: the messages with that id
    assert shown["message_id"] == "4f1c0e9d2b6a4e0c8f7a1b2c3d4e5f60"


async def test_show_says_when_a_prefix_is_ambiguous_and_names_the_candidates(
    broker_url, connection, queue
):
    await fill(connection, queue, dead(queue, "ab12-first"), dead(queue, "ab34-second"))
    result = await run_cli_async("dlq", "show", queue, "ab", url=broker_url, columns=80)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "ambiguous" in lines[0]
    assert "ab12-first" in lines[0] and "ab34-second" in lines[0]
    assert await depth(connection, f"{queue}.dlq") == 2  # reading changes nothing


# -- a reason none of rabbitq's matches nothing: a one-line note with the known ones ----
# (issue 41 item 3: any reason a dead letter has is selectable; a typo earns a note)


@pytest.mark.parametrize("command", ["list", "replay", "purge", "export"])
async def test_an_unknown_reason_that_matches_nothing_is_noted_with_the_known_ones(
    broker_url, queue, command, tmp_path
):
    extra = [str(tmp_path / "out.jsonl")] if command == "export" else []
    yes = ["--yes"] if command == "purge" else []
    result = await run_cli_async(
        "dlq", command, queue, *extra, *yes, "--reason", "exausted", url=broker_url, columns=80
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (note,) = [line for line in result.stderr.splitlines() if line.startswith("note:")]
    for known in ("exhausted", "permanent", "invalid", "unknown-type", "broker:"):
        assert known in note
    assert "'exausted'" in note


@pytest.mark.parametrize("reason", ["blob-missing", "fraud-check"])
async def test_a_reason_rabbitq_does_not_list_selects_the_dead_letters_that_have_it(
    broker_url, connection, queue, reason
):
    """``blob-missing`` (large payloads) and a middleware's own reason are selectable."""
    await fill(connection, queue, dead(queue, "m-odd", reason=reason), dead(queue, "m-plain"))
    result = await run_cli_async(
        "dlq", "list", queue, "--reason", reason, "--json", url=broker_url, columns=80
    )
    assert result.returncode == 0, result.stderr
    assert [m["message_id"] for m in orjson.loads(result.stdout)] == ["m-odd"]
    assert "note:" not in result.stderr  # it matched: no typo to suspect

    moved = await run_cli_async("dlq", "replay", queue, "--reason", reason, url=broker_url)
    assert moved.returncode == 0, moved.stderr
    assert await depth(connection, queue) == 1 and await depth(connection, f"{queue}.dlq") == 1


async def test_a_broker_reason_is_still_accepted(broker_url, queue):
    result = await run_cli_async(
        "dlq", "list", queue, "--reason", "broker:delivery_limit", url=broker_url, columns=80
    )
    assert result.returncode == 0, result.stderr
