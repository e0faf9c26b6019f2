"""The ``rabbitq`` command: help, and a one-line error (never a password) for every failure."""

from __future__ import annotations

import asyncio
import logging
import socket
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import aio_pika
import orjson
import pytest
from click.testing import CliRunner, Result

from rabbitq.cli import main
from tests.helpers import assert_one_line_error

UNREACHABLE = "amqp://user:s3cretpw@127.0.0.1:1/"
APP = "rq_unit_cli_app:app"

APP_SOURCE = """
    from rabbitq import App, Message, RetryPolicy

    class Signup(Message, type="unit.cli.signup"):
        email: str
        age: int

    class Audit(Message, type="unit.cli.audit"):
        '''Known to the process, but this app has no handler for it.'''
        action: str

    app = App(queue="unit-cli", exchange="unit-cli-x", retry=RetryPolicy(delays=(1, 30)))

    @app.handler(Signup)
    async def signup(msg):
        pass

    not_an_app = "just a string"
"""


@pytest.fixture(scope="module")
def app_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    directory = tmp_path_factory.mktemp("cli_app")
    (directory / "rq_unit_cli_app.py").write_text(textwrap.dedent(APP_SOURCE))
    yield directory
    sys.modules.pop("rq_unit_cli_app", None)


@pytest.fixture(autouse=True)
def in_app_dir(app_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run each command from the app's directory, as a user would."""
    monkeypatch.chdir(app_dir)
    monkeypatch.syspath_prepend(str(app_dir))
    monkeypatch.delenv("RABBITQ_URL", raising=False)


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    """The CLI configures logging for its process; put pytest's set-up back afterwards."""
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    levels = {name: logging.getLogger(name).level for name in ("aio_pika", "aiormq", "pamqp")}
    yield
    root.handlers[:], level = saved
    root.setLevel(level)
    for name, value in levels.items():
        logging.getLogger(name).setLevel(value)


def run(*args: str, input: str | None = None, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, list(args), input=input, env=env, catch_exceptions=False)


# -- help ----------------------------------------------------------------------------


def test_rabbitq_without_a_command_lists_the_commands():
    result = run("--help")
    assert result.exit_code == 0
    assert "RabbitMQ consumers that never lose work" in result.output
    for command in ("worker", "publish", "topology", "stats"):
        assert command in result.output


@pytest.mark.parametrize(
    ("command", "explains"),
    [
        (
            "worker",
            [
                "MODULE:APP",
                "Consume the app's queue until SIGTERM/SIGINT",
                "--prefetch",
                "--processes",
                "--metrics-port",
                "--metrics-bind",
            ],
        ),
        ("publish", ["MODULE:APP TYPE JSON", "Validate JSON as a TYPE message", "--message-id"]),
        (
            "topology",
            ["MODULE:APP", "Declare the app's exchange, queues and bindings", "--dry-run"],
        ),
        ("stats", ["QUEUE|MODULE:APP", "Messages and consumers", "--delay"]),
    ],
)
def test_each_command_explains_itself(command, explains):
    for flag in ("--help", "-h"):
        result = run(command, flag)
        assert result.exit_code == 0, result.output
        for text in [f"Usage: main {command}", *explains, "--url", "RABBITQ_URL"]:
            assert text in result.output


def test_the_version_is_printed():
    result = run("--version")
    assert result.exit_code == 0
    assert result.output.startswith("rabbitq ")


def test_python_dash_m_rabbitq_runs_the_cli():
    completed = subprocess.run(
        [sys.executable, "-m", "rabbitq", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.startswith("Usage: rabbitq [OPTIONS] COMMAND [ARGS]...")
    assert completed.stderr == ""


def test_an_unknown_command_is_a_usage_error():
    result = run("frobnicate")
    assert result.exit_code == 2
    assert "No such command 'frobnicate'" in result.output


# -- loading the app -----------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ["worker"],
        ["publish", "--url", UNREACHABLE],  # TYPE and JSON are appended below
        ["topology", "--dry-run"],
        ["stats"],
    ],
    ids=["worker", "publish", "topology", "stats"],
)
@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("rq_unit_cli_nowhere:app", "cannot import module 'rq_unit_cli_nowhere': no such module"),
        ("rq_unit_cli_app:nope", "module 'rq_unit_cli_app' has no attribute 'nope'"),
        ("rq_unit_cli_app:not_an_app", "is a str, not a rabbitq.App"),
    ],
)
def test_a_bad_module_app_path_is_a_one_line_error(command, spec, says):
    name, *options = command
    args = [name, spec, *options]
    if name == "publish":
        args += ["unit.cli.signup", "{}"]
    line = assert_one_line_error(run(*args))
    assert says in line


@pytest.mark.parametrize("command", ["worker", "publish", "topology"])
def test_a_path_without_a_colon_explains_the_format(command):
    args = [command, "rq_unit_cli_app"]
    if command == "publish":
        args += ["unit.cli.signup", "{}"]
    line = assert_one_line_error(run(*args), exit_code=2)  # bad usage, as click's own
    assert "expected MODULE:APP (for example 'myservice.tasks:app')" in line


# -- publish -------------------------------------------------------------------------


@pytest.mark.parametrize("body", ["{bad", "", "{'email': 'a@b.c'}", '{"email": "a@b.c",}'])
def test_publish_of_a_body_that_is_not_json_is_a_usage_error(body):
    result = run("publish", APP, "unit.cli.signup", body, "--url", UNREACHABLE)
    assert result.exit_code == 2, result.output
    assert "Error: Invalid value for JSON: not valid JSON" in result.output
    assert "cannot reach" not in result.output  # refused before any connection


def test_publish_of_a_body_failing_validation_names_the_fields():
    body = '{"email": "a@b.c", "age": "old"}'
    result = run("publish", APP, "unit.cli.signup", body, "--url", UNREACHABLE)
    assert result.exit_code == 2, result.output
    assert (
        "Error: Invalid value for JSON: unit.cli.signup failed validation: "
        "age: Input should be a valid integer" in result.output
    )


def test_publish_of_a_body_missing_a_field_names_it():
    result = run("publish", APP, "unit.cli.signup", '{"email": "a@b.c"}', "--url", UNREACHABLE)
    assert result.exit_code == 2, result.output
    assert "age: Field required" in result.output


@pytest.mark.parametrize("body", ["[1, 2]", "42", "null", '"text"'])
def test_publish_of_json_that_is_not_an_object_is_a_usage_error(body):
    result = run("publish", APP, "unit.cli.signup", body, "--url", UNREACHABLE)
    assert result.exit_code == 2, result.output
    assert "Error: Invalid value for JSON: unit.cli.signup failed validation" in result.output


def test_publish_reads_the_body_from_stdin_with_a_dash():
    result = run("publish", APP, "unit.cli.signup", "-", "--url", UNREACHABLE, input='{"age": 1}')
    assert result.exit_code == 2, result.output
    assert "email: Field required" in result.output


def test_publish_of_an_unknown_type_names_the_types_the_app_handles():
    result = run("publish", APP, "unit.cli.nope", "{}", "--url", UNREACHABLE)
    line = assert_one_line_error(result, exit_code=2)  # bad input, as a failed validation
    assert "unknown message type 'unit.cli.nope' (this app handles: unit.cli.signup)" in line


@pytest.fixture
def unit_cli_exchange(broker_url: str) -> Iterator[str]:
    """The broker URL; the app's exchange, which publish declares, is deleted afterwards."""
    yield broker_url

    async def delete() -> None:
        connection = await aio_pika.connect(broker_url)
        async with connection:
            channel = await connection.channel()
            await channel.exchange_delete("unit-cli-x")

    asyncio.run(delete())


@pytest.mark.broker
def test_publish_of_a_message_no_queue_is_bound_for_is_an_error_not_a_silent_loss(
    unit_cli_exchange,
):
    body = '{"email": "a@b.c", "age": 3}'
    line = assert_one_line_error(
        run("publish", APP, "unit.cli.signup", body, "--url", unit_cli_exchange)
    )
    assert "no queue is bound to exchange 'unit-cli-x' with routing key 'unit.cli.signup'" in line
    assert "nothing was stored" in line


@pytest.mark.broker
def test_publish_with_a_delay_to_an_app_whose_queue_does_not_exist_is_a_one_line_error(
    unit_cli_exchange,
):
    body = '{"email": "a@b.c", "age": 3}'
    line = assert_one_line_error(
        run("publish", APP, "unit.cli.signup", body, "--delay", "5", "--url", unit_cli_exchange),
        exit_code=1,  # the broker's state, not the command's input
    )
    assert "queue 'unit-cli' does not exist, so a delayed message would have nowhere" in line


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--at", "2026-12-01T09:00:00"], "has no offset: add Z for UTC"),
        (["--at", "tomorrow"], "not an ISO 8601 time: 'tomorrow'"),
        (["--delay", "-1"], "a duration cannot be negative"),
        (["--delay", "5000000"], "is past what the delay ladder holds (at most 48 days"),
        (["--delay", "5", "--at", "2026-12-01T09:00:00+00:00"], "--delay and --at do not go"),
    ],
)
def test_publish_with_an_impossible_delay_or_time_fails_before_connecting(args, says):
    body = '{"email": "a@b.c", "age": 3}'
    result = run("publish", APP, "unit.cli.signup", body, *args, "--url", UNREACHABLE)
    line = assert_one_line_error(result, exit_code=2)  # bad input, before connecting
    assert says in line


# -- an unreachable broker -----------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["worker", APP, "--wait-for-broker", "0"],  # (without: it waits)
        ["worker", APP, "--processes", "2", "--wait-for-broker", "0"],
        ["publish", APP, "unit.cli.signup", '{"email": "a@b.c", "age": 3}'],
        ["publish", APP, "unit.cli.audit", '{"action": "login"}'],
        ["topology", APP],
        ["stats", "unit-cli"],
        ["stats", APP],
    ],
    ids=[
        "worker",
        "worker-processes",
        "publish",
        "publish-unhandled-type",
        "topology",
        "stats-queue",
        "stats-app",
    ],
)
def test_an_unreachable_broker_is_a_one_line_error_without_the_password(args):
    result = run(*args, "--url", UNREACHABLE)
    line = assert_one_line_error(result)
    assert "s3cretpw" not in result.output
    assert "cannot reach RabbitMQ at amqp://user:***@127.0.0.1:1/" in line
    assert "RABBITQ_URL" in line  # says how to point it elsewhere


def test_a_metrics_port_in_use_is_a_one_line_error():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run(
            "worker", APP, "--metrics-port", str(port), "--metrics-bind", "127.0.0.1",
            "--url", UNREACHABLE,
        )  # fmt: skip
    line = assert_one_line_error(result)
    assert line.startswith(f"Error: cannot serve metrics on 127.0.0.1:{port}: "), line


def test_the_url_from_the_environment_is_used_and_its_password_hidden():
    result = run("stats", "unit-cli", env={"RABBITQ_URL": UNREACHABLE})
    line = assert_one_line_error(result)
    assert "s3cretpw" not in result.output
    assert "amqp://user:***@127.0.0.1:1/" in line


def test_a_malformed_url_is_a_one_line_error_without_the_password():
    result = run("stats", "unit-cli", "--url", "amqp://user:s3cretpw@127.0.0.1:notaport/")
    assert result.exit_code == 2, result.output  # bad usage, before connecting
    assert "s3cretpw" not in result.output
    assert "Traceback" not in result.output


# -- topology and stats --------------------------------------------------------------


def test_topology_dry_run_json_prints_the_plan_without_touching_the_broker():
    result = run("topology", APP, "--dry-run", "--json", "--url", UNREACHABLE)
    assert result.exit_code == 0, result.output
    rows = orjson.loads(result.output)  # one JSON array
    quorum = {  # the default queue type
        "x-queue-type": "quorum",
        "x-delivery-limit": 10,
        "x-dead-letter-strategy": "at-least-once",
        "x-overflow": "reject-publish",
    }
    assert rows == [
        {"kind": "exchange", "name": "unit-cli-x", "arguments": {"type": "topic"}},
        {
            "kind": "main",
            "name": "unit-cli",
            "arguments": {
                "x-dead-letter-exchange": "",
                "x-dead-letter-routing-key": "unit-cli.dlq",
                **quorum,
            },
        },
        {
            "kind": "retry",
            "name": "unit-cli.retry.1s",
            "arguments": {
                "x-message-ttl": 1000,
                "x-dead-letter-exchange": "",
                "x-dead-letter-routing-key": "unit-cli",
                **quorum,
            },
        },
        {
            "kind": "retry",
            "name": "unit-cli.retry.30s",
            "arguments": {
                "x-message-ttl": 30000,
                "x-dead-letter-exchange": "",
                "x-dead-letter-routing-key": "unit-cli",
                **quorum,
            },
        },
        {
            "kind": "dlq",
            "name": "unit-cli.dlq",
            "arguments": {
                "x-queue-type": "quorum",
                "x-delivery-limit": 1_000_000_000,
                "x-overflow": "reject-publish",
            },
        },
        {
            "kind": "binding",
            "name": "unit-cli-x -> unit-cli",
            "arguments": {"routing_key": "unit.cli.signup"},
        },
        {
            "kind": "exchange",
            "name": "rabbitq.delay.deliver",
            "arguments": {"type": "headers", "alternate-exchange": "rabbitq.delay.undeliverable"},
        },
        {
            "kind": "catch-all",
            "name": "rabbitq.delay.undeliverable",
            "arguments": {"exchange": "fanout", "holds": "delayed messages whose queue is gone"},
        },
        {
            "kind": "binding",
            "name": "rabbitq.delay.deliver -> unit-cli",
            "arguments": {"x-match": "all", "rabbitq-delay-to": "unit-cli"},
        },
        {
            "kind": "delay ladder",
            "name": "rabbitq.delay.quorum.00 .. 24",
            "arguments": {
                "shared": "by every app on the vhost",
                "levels": 25,
                "x-message-ttl": "125 .. 2097152000",
                "x-dead-letter-exchange": "the level below",
                "x-queue-type": "quorum",
                "x-delivery-limit": 1_000_000_000,
                "x-dead-letter-strategy": "at-least-once",
                "x-overflow": "reject-publish",
            },
        },
    ]


def test_topology_dry_run_prints_a_table_of_what_would_be_declared():
    result = run("topology", APP, "--dry-run", "--url", UNREACHABLE)
    assert result.exit_code == 0, result.output
    assert "would declare" in result.output
    for name in ("unit-cli-x", "unit-cli.retry.1s", "unit-cli.retry.30s", "unit-cli.dlq"):
        assert name in result.output


@pytest.mark.parametrize("delay", ["0", "-1", "0.0005"])
def test_stats_with_an_impossible_delay_is_a_one_line_error(delay):
    result = run("stats", "unit-cli", "--delay", delay, "--url", UNREACHABLE)
    line = assert_one_line_error(result, exit_code=2)  # bad input, before connecting
    says = "cannot be negative" if delay == "-1" else "a positive whole number of milliseconds"
    assert says in line


@pytest.mark.broker
def test_stats_of_a_queue_that_does_not_exist_is_a_one_line_error(broker_url):
    queue = f"unit-cli-missing-{uuid.uuid4().hex[:10]}"
    line = assert_one_line_error(run("stats", queue, "--url", broker_url))
    assert f"queue {queue!r} does not exist" in line
    assert "rabbitq topology MODULE:APP" in line
    assert ":guest@" not in line  # the password of the default guest account too
