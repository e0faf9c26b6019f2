"""One ``--json`` rule over every command (issue 41, item 8; docs/cli.md, "JSON output"):
every leaf command but the long-running ones takes the same ``--json``, every one that
takes an app or a queue takes ``--url``, and what ``--json`` prints, a result or an
error, is exactly one JSON document on stdout (``json.loads`` of the whole of it)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator

import click
import pytest
from aio_pika.abc import AbstractRobustConnection

from rabbitq.cli import main
from rabbitq.cli.common import json_option
from tests.helpers import run_cli, run_cli_async

LONG_RUNNING = {("worker",), ("scheduler",), ("outbox", "relay"), ("console",)}
"""They run until a signal and log (``--log-json``) instead of printing a result."""
NO_BROKER = {("version",), ("keys", "generate")}
"""They take no app and no queue: nothing to connect to."""
DOWN = "amqp://guest:guest@127.0.0.1:1/"  # nobody listens: a connection error, at once


def leaves(group: click.Group = main, path: tuple[str, ...] = ()) -> Iterator[tuple]:
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from leaves(command, (*path, name))
        else:
            yield (*path, name), command


def option(command: click.Command, flag: str) -> click.Option | None:
    found = [p for p in command.params if isinstance(p, click.Option) and flag in p.opts]
    return found[0] if found else None


ALL = dict(leaves())
THE_JSON_OPTION = option(json_option(click.command()(lambda: None)), "--json")


def test_the_tree_walk_sees_every_command():
    assert len(ALL) > 30 and ("dlq", "list") in ALL and ("cancel",) in ALL
    assert LONG_RUNNING | NO_BROKER <= set(ALL)


@pytest.mark.parametrize("path", sorted(set(ALL) - LONG_RUNNING), ids=" ".join)
def test_every_command_takes_the_one_json_option(path):
    found = option(ALL[path], "--json")
    assert found is not None, f"rabbitq {' '.join(path)} has no --json"
    assert THE_JSON_OPTION is not None
    assert (found.name, found.is_flag, found.help) == (
        THE_JSON_OPTION.name,
        True,
        THE_JSON_OPTION.help,
    ), f"rabbitq {' '.join(path)}: --json is not common.json_option"


@pytest.mark.parametrize("path", sorted(set(ALL) - NO_BROKER), ids=" ".join)
def test_every_command_with_an_app_or_a_queue_takes_url_and_the_tls_files(path):
    for flag in ("--url", "--tls-ca", "--tls-cert", "--tls-key"):
        assert option(ALL[path], flag) is not None, f"rabbitq {' '.join(path)} has no {flag}"


def one_document(stdout: str) -> object:
    """The whole of stdout as one JSON document (two documents, or text, fail here)."""
    assert stdout.count("\n") == 1 and stdout.endswith("\n"), stdout
    return json.loads(stdout)


@pytest.mark.parametrize(
    ("args", "shape"),
    [
        (["version"], dict),
        (["keys", "generate", "--id", "k2"], dict),
        (["topology", "examples.email_service:app", "--dry-run"], list),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else v.__name__,
)
def test_a_command_that_needs_no_broker_prints_one_document(args, shape):
    done = run_cli(*args, "--json")
    assert done.returncode == 0, done.stderr
    assert isinstance(one_document(done.stdout), shape)


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["dlq", "list"], 2),  # a missing argument
        (["no-such-command"], 2),
        (["publish", "examples.email_service:app", "email.send", "{}"], 2),  # invalid
        (["stats", "emails", "--url", DOWN], 1),  # no broker
        (["cancel", "examples.email_service:app", "m1"], 1),  # not cancellable
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else str(v),
)
def test_an_error_under_json_is_one_json_document_with_its_exit_code(args, code):
    done = run_cli(*args, "--json")
    assert done.returncode == code, done.stdout + done.stderr
    document = one_document(done.stdout)
    assert isinstance(document, dict) and set(document) == {"error", "exit_code"}
    assert document["exit_code"] == code and document["error"]
    assert done.stderr.startswith("Error: ") and document["error"] in done.stderr
    assert "***" in document["error"] or "guest:guest" not in document["error"]


@pytest.fixture
async def queue(connection: AbstractRobustConnection, uid: str) -> AsyncIterator[str]:
    """A service queue and its empty DLQ, deleted afterwards."""
    name = f"t.{uid}.json"
    channel = await connection.channel()
    await channel.declare_queue(name, durable=True)
    await channel.declare_queue(f"{name}.dlq", durable=True)
    try:
        yield name
    finally:
        for q in (name, f"{name}.dlq"):
            await channel.queue_delete(q)
        await channel.close()


@pytest.mark.parametrize(
    ("args", "shape"),
    [
        (["stats", "{q}"], list),
        (["dlq", "list", "{q}"], list),
        (["dlq", "replay", "{q}", "--dry-run"], dict),
        (["dlq", "purge", "{q}", "--yes", "--reason", "blob-missing"], dict),
        (["dlq", "export", "{q}", "{tmp}/out.jsonl"], dict),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else v.__name__,
)
async def test_a_command_on_the_broker_prints_one_document(
    broker_url, queue, tmp_path, args, shape
):
    filled = [a.format(q=queue, tmp=tmp_path) for a in args]
    done = await run_cli_async(*filled, "--json", url=broker_url)
    assert done.returncode == 0, done.stderr
    document = one_document(done.stdout)
    assert isinstance(document, shape)
    if shape is dict and args[0] == "dlq":  # a tally: what it did, as an object
        assert document["done"] == 0 and document["failed"] == 0
