"""Every command refuses a broker URL it cannot use at once, in one line (issue 12, item 1).

Before, ``--url localhost:5672`` made aio-pika retry forever: the commands printed
nothing and never returned. Real subprocesses, so a hang is a failed test.
"""

from __future__ import annotations

import subprocess

import pytest

from tests.helpers import assert_one_line_error, run_cli

APP = "examples.email_service:app"
BODY = '{"to": "a@example.com", "subject": "hi", "body": "x"}'

COMMANDS = {
    "worker": ["worker", APP],
    "publish": ["publish", APP, "email.send", BODY],
    "topology": ["topology", APP],
    "stats": ["stats", "emails"],
    "demo": ["demo"],
    "dlq list": ["dlq", "list", "emails"],
    "dlq replay": ["dlq", "replay", "emails", "--dry-run"],
}
BAD_URLS = [
    "localhost:5672",
    "guest:s3cret@localhost",
    "amqp:///",
    "garbage",
    "http://guest:s3cret@localhost:5672/",
]


def assert_bad_url_error(result: subprocess.CompletedProcess[str], words: str) -> None:
    """The command exited 2 (bad input, before connecting) with one line saying the
    broker URL is invalid and why, and without the URL's password."""
    line = assert_one_line_error(result, exit_code=2)
    assert line.startswith("Error: invalid broker URL"), line
    assert words in line
    assert "s3cret" not in result.stderr + result.stdout


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_rejects_a_url_without_a_scheme_in_one_line(name):
    assert_bad_url_error(run_cli(*COMMANDS[name], "--url", "localhost:5672"), "no scheme")


@pytest.mark.parametrize("url", BAD_URLS)
def test_the_worker_says_what_is_wrong_with_each_bad_url_and_exits(url):
    expected = {"amqp:///": "no host", "http://guest:s3cret@localhost:5672/": "not AMQP"}
    assert_bad_url_error(run_cli(*COMMANDS["worker"], "--url", url), expected.get(url, "scheme"))


def test_a_bad_rabbitq_url_in_the_environment_is_reported_the_same_way():
    assert_bad_url_error(run_cli("stats", "emails", url="garbage"), "no scheme")


def test_a_worker_with_processes_checks_the_url_before_starting_any():
    result = run_cli(*COMMANDS["worker"], "--processes", "2", "--url", "amqp:///")
    assert_bad_url_error(result, "no host")
