"""The command line as a new user met it in the first hour, third round (issue "The first
hour, third round", item 7): help examples that paste, ``--json`` that is one JSON
document, durations and times that read as people write them, exit codes as the
README's table says. Each through the real ``rabbitq`` command, as a subprocess."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

import aio_pika
import pytest
from click.testing import CliRunner

from rabbitq._amqp.refusal import plain_port_hint
from rabbitq.cli import main
from rabbitq.schedule.plan import Progress, encode_progress, progress_arguments, progress_queue
from tests.helpers import assert_one_line_error, run_cli

SERVICE = """
import os

from rabbitq import App, Message


class Ping(Message, type="t.fh3.ping"):
    n: int


app = App(queue=os.environ.get("T_QUEUE", "t.fh3.never-declared"), queue_type="classic")


@app.handler(Ping)
async def ping(msg: Ping) -> None:
    pass


@app.schedule(cron="0 9 * * MON-FRI", tz="Europe/Berlin", name="weekday_sales_report")
def report(tick):
    return Ping(n=1)
"""


@pytest.fixture
def service(tmp_path: Path) -> Path:
    (tmp_path / "service.py").write_text(SERVICE)
    return tmp_path


@pytest.fixture
def declared(service: Path, broker_url: str) -> Iterator[tuple[Path, dict[str, str]]]:
    """The service's queues declared on the real broker (deleted after): its directory
    and the environment that names its queue and the broker."""
    env = {"T_QUEUE": f"t.fh3.{uuid.uuid4().hex[:10]}", "RABBITQ_URL": broker_url}
    done = run_cli("topology", "service:app", cwd=service, env=env)
    assert done.returncode == 0, done.stderr
    yield service, env
    gone = run_cli("topology", "service:app", "--delete", "--force", cwd=service, env=env)
    assert gone.returncode == 0, gone.stderr


def json_tool(text: str) -> object:
    """What ``python -m json.tool`` makes of ``text`` (it fails on one object per line)."""
    tool = subprocess.run(
        [sys.executable, "-m", "json.tool"], input=text, capture_output=True, text=True
    )
    assert tool.returncode == 0, f"json.tool refused:\n{text}\n{tool.stderr}"
    return json.loads(tool.stdout)


# -- help: examples that paste --------------------------------------------------------

EXAMPLES = {
    ("topology",): "      rabbitq topology myservice:app --delete --dry-run\n",
    ("publish",): "      rabbitq publish myservice:app reminder.send '{...}' "
    "--at 2030-12-01T09:00:00+01:00\n",
    ("status",): "      rabbitq status myservice:app 6f1c0e2a9b3d4c5e8f7a6b5c4d3e2f1a --json\n",
    ("stats",): "      rabbitq stats myservice:app --json | python -m json.tool\n",
    ("doctor",): "      rabbitq doctor myservice:app --management-url http://rabbit:15672\n",
    ("dlq", "show"): "      rabbitq dlq show emails 6f1c0e2a --json\n",
    ("dlq", "import"): "      rabbitq dlq import emails emails-dlq.jsonl --replay\n",
    ("demo",): "      rabbitq demo --queue my-demo --count 50\n",
    ("dlq", "purge"): "      rabbitq dlq purge emails --reason invalid --until 7d --yes\n",
}


@pytest.mark.parametrize("command", EXAMPLES, ids=" ".join)
def test_every_example_in_the_help_is_one_whole_line_even_in_a_narrow_terminal(command):
    shown = run_cli(*command, "--help", columns=60)
    assert shown.returncode == 0, shown.stderr
    assert EXAMPLES[command] in shown.stdout, shown.stdout


# -- --json: one document -------------------------------------------------------------


def test_topology_json_is_one_document_json_tool_reads(service):
    shown = run_cli("topology", "service:app", "--dry-run", "--json", cwd=service)
    assert shown.returncode == 0, shown.stderr
    rows = json_tool(shown.stdout)
    assert isinstance(rows, list) and rows[0]["kind"] == "exchange"


@pytest.mark.services
def test_stats_and_publish_json_are_one_document_each(declared):
    directory, env = declared
    stats = run_cli("stats", "service:app", "--json", cwd=directory, env=env)
    assert stats.returncode == 0, stats.stderr
    rows = json_tool(stats.stdout)
    assert isinstance(rows, list) and rows[0] == {
        "queue": env["T_QUEUE"], "kind": "main", "exists": True, "messages": 0, "consumers": 0
    }  # fmt: skip

    published = run_cli("publish", "service:app", "t.fh3.ping", '{"n": 1}', "--delay", "5m",
                        "--json", cwd=directory, env=env)  # fmt: skip
    assert published.returncode == 0, published.stderr
    sent = json_tool(published.stdout)
    assert isinstance(sent, dict) and sent["type"] == "t.fh3.ping" and sent["message_id"]
    assert sent["due"] is not None and sent["due"].endswith("+00:00")


# -- durations and times --------------------------------------------------------------


@pytest.mark.parametrize("delay", ["5m", "90s", "2h", "1.5", "500ms"])
def test_a_delay_reads_as_a_duration_as_since_does(service, delay):
    shown = run_cli("topology", "service:app", "--dry-run", "--delay", delay, cwd=service)
    assert shown.returncode == 0, shown.stderr


def test_a_delay_that_is_no_duration_is_bad_input(service):
    shown = run_cli("publish", "service:app", "t.fh3.ping", '{"n": 1}', "--delay", "5 minutes",
                    cwd=service)  # fmt: skip
    line = assert_one_line_error(shown, exit_code=2)
    assert "cannot read the duration '5 minutes'" in line and "5m" in line


def test_a_time_without_an_offset_says_to_add_z_or_an_offset(service):
    shown = run_cli("publish", "service:app", "t.fh3.ping", '{"n": 1}',
                    "--at", "2026-12-01T09:00:00", cwd=service)  # fmt: skip
    line = assert_one_line_error(shown, exit_code=2)
    assert "'2026-12-01T09:00:00' has no offset: add Z for UTC" in line
    assert "2026-12-01T09:00:00+01:00" in line and "tzinfo" not in line


def test_delay_and_at_together_name_the_options(service):
    shown = run_cli("publish", "service:app", "t.fh3.ping", '{"n": 1}', "--delay", "5",
                    "--at", "2026-12-01T09:00:00Z", cwd=service)  # fmt: skip
    line = assert_one_line_error(shown, exit_code=2)
    assert "--delay and --at do not go together" in line and "delay=" not in line


# -- exit codes: 2 for a wrong command line -------------------------------------------


def test_a_url_that_is_no_url_is_bad_usage():
    shown = run_cli("stats", "emails", "--url", "not a url")
    line = assert_one_line_error(shown, exit_code=2)
    assert "invalid broker URL 'not a url'" in line


def test_a_worker_without_its_app_name_is_bad_usage():
    shown = run_cli("worker", "myservice")
    line = assert_one_line_error(shown, exit_code=2)
    assert "expected MODULE:APP" in line and "'rabbitq worker --help'" in line


def test_purge_off_a_terminal_without_yes_is_bad_usage():
    # CliRunner's stdin is not a terminal; the refusal comes before any connection
    done = CliRunner().invoke(main, ["dlq", "purge", "emails", "--url", "amqp://nohost.invalid/"])
    line = assert_one_line_error(done, exit_code=2)
    assert "without --yes" in line


# -- schedule list at 80 columns ------------------------------------------------------


@pytest.mark.services
async def test_schedule_list_fits_80_columns_with_the_next_tick_whole(declared, connection):
    directory, env = declared
    tick = datetime(2026, 11, 27, 8, 0, tzinfo=UTC)
    record = Progress(ticks={"weekday_sales_report": tick},
                      published={"weekday_sales_report": tick}, leader="a-host:1234",
                      written=tick)  # fmt: skip
    channel = await connection.channel(publisher_confirms=True)
    queue = await channel.declare_queue(
        progress_queue(env["T_QUEUE"]), durable=True, arguments=progress_arguments("classic")
    )
    await channel.default_exchange.publish(
        aio_pika.Message(encode_progress(record)), routing_key=queue.name
    )
    await channel.close()

    shown = await asyncio.to_thread(
        run_cli, "schedule", "list", "service:app", cwd=directory, env=env, columns=80
    )

    assert shown.returncode == 0, shown.stderr
    assert max(map(len, shown.stdout.splitlines())) <= 80, shown.stdout
    row = next(line for line in shown.stdout.splitlines() if "weekday" in line)
    assert re.search(r"│ \d{4}-\d\d-\d\dT\d\d:00:00Z │$", row), shown.stdout
    assert "2026-11-27T0" in shown.stdout  # the last tick, folded or not


# -- amqps on the plain port ----------------------------------------------------------


@pytest.mark.services
def test_amqps_on_the_plain_port_says_that_amqps_listens_on_5671(broker_url):
    parts = urlsplit(broker_url)
    if parts.port not in (None, 5672):
        pytest.skip(f"the test broker is not on the plain port 5672: {parts.port}")
    netloc = parts.netloc if parts.port else f"{parts.netloc}:5672"
    url = parts._replace(scheme="amqps", netloc=netloc).geturl()

    shown = run_cli("stats", "emails", "--url", url)

    line = assert_one_line_error(shown, exit_code=1)
    assert "TLS handshake with amqps://" in line
    assert "port 5672 is the plain amqp:// port; amqps usually listens on 5671" in line
    assert f"@{parts.hostname}:5671/" in line


def test_the_port_hint_is_only_for_amqps_on_5672():
    assert plain_port_hint("amqps://u:p@h:5672/").startswith("port 5672 is the plain")
    assert "u:p@" not in plain_port_hint("amqps://u:p@h:5672/")
    for url in ("amqps://u:p@h:5671/", "amqps://u:p@h/", "amqp://u:p@h:5672/"):
        assert plain_port_hint(url) == ""
