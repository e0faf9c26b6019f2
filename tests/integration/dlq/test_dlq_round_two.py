"""``rabbitq dlq`` in the first hour, second round (issue 25, item 9), through the real
command: the error of ``list`` is readable at 80 columns and whole off a terminal, and
``import --replay`` says where the messages went."""

from __future__ import annotations

import orjson
import pytest

from tests.helpers import run_cli_async

from .test_first_hour import dead, depth, fill

pytestmark = pytest.mark.broker


@pytest.fixture
async def queue(connection, uid):
    """A service queue and its DLQ, both empty, deleted afterwards."""
    name = f"t.{uid}.dlq2"
    channel = await connection.channel()
    await channel.declare_queue(name, durable=True)
    await channel.declare_queue(f"{name}.dlq", durable=True)
    yield name
    for q in (name, f"{name}.dlq"):
        await channel.queue_delete(q)
    await channel.close()


ERROR = "TimeoutError: smtp timed out after 30 s while talking to mail.example.com"


async def test_list_off_a_terminal_prints_each_error_on_its_ids_line(broker_url, connection, queue):
    await fill(connection, queue, dead(queue, "4f1c0e9d2b6a4e0c8f7a1b2c3d4e5f60"))
    result = await run_cli_async("dlq", "list", queue, url=broker_url)
    assert result.returncode == 0, result.stderr
    (row,) = [line for line in result.stdout.splitlines() if "4f1c0e9d" in line]
    assert ERROR[:59] in row  # its first 60 characters, on the same line


async def test_list_at_80_columns_puts_the_error_under_the_id_instead_of_cutting_it(
    broker_url, connection, queue
):
    await fill(connection, queue, dead(queue, "4f1c0e9d2b6a4e0c8f7a1b2c3d4e5f60"))
    result = await run_cli_async("dlq", "list", queue, url=broker_url, columns=80)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    cells = " ".join(line.split("│")[1].strip() for line in lines if line.count("│") > 2)
    assert "TimeoutError: smtp timed out after 30 s while talking" in cells


async def test_import_with_replay_says_it_sent_the_messages_to_the_main_queue(
    broker_url, connection, queue, tmp_path
):
    await fill(connection, queue, dead(queue, "m-1"), dead(queue, "m-2"))
    path = tmp_path / "dead.jsonl"
    exported = await run_cli_async("dlq", "export", queue, str(path), "--delete", url=broker_url)
    assert exported.returncode == 0, exported.stderr

    result = await run_cli_async("dlq", "import", queue, str(path), "--replay", url=broker_url)
    as_json = await run_cli_async("dlq", "import", queue, str(path), "--replay", "--json",
                                  url=broker_url)  # fmt: skip

    assert result.returncode == 0, result.stderr
    assert f"import {queue}.dlq: imported 2 into {queue}," in result.stdout
    assert orjson.loads(as_json.stdout)["into"] == [queue]
    assert await depth(connection, queue) == 4
    assert await depth(connection, f"{queue}.dlq") == 0
