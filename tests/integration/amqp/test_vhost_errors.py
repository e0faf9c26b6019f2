"""A vhost that does not exist (or that the user may not use) is said as such, in one
line with the broker's own words, by every command (issue 12, item 2).

Before, it read "cannot reach RabbitMQ ... (Expected one of ['Connection.OpenOk'], got
<Connection.Close object at 0x...>); start one with 'rabbitmq-server -detached'".
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
APP = "examples.email_service:app"
BODY = '{"to": "a@example.com", "subject": "hi", "body": "x"}'
COMMANDS = {
    "worker": ["worker", APP],
    "publish": ["publish", APP, "email.send", BODY],
    "topology": ["topology", APP],
    "stats": ["stats", "emails"],
    "demo": ["demo"],
    "demo --cleanup": ["demo", "--cleanup"],
    "dlq list": ["dlq", "list", "emails"],
    "dlq replay": ["dlq", "replay", "emails", "--dry-run"],
    "dlq purge": ["dlq", "purge", "emails", "--yes"],
}


def vhost_url(broker_url: str, vhost: str) -> str:
    return broker_url.rstrip("/") + "/" + vhost


@pytest.mark.broker
@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_says_the_vhost_does_not_exist(name, broker_url, uid):
    vhost = f"novhost-{uid}"
    env = {k: v for k, v in os.environ.items() if k != "RABBITQ_URL"}
    result = subprocess.run(
        [sys.executable, "-m", "rabbitq", *COMMANDS[name], "--url", vhost_url(broker_url, vhost)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    if name == "worker":  # it logs that it is connecting, then the error
        lines = [line for line in lines if " INFO " not in line]
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert f"vhost {vhost!r}" in line
    assert "does not exist or" in line  # what it means, then the broker's words
    assert f"vhost {vhost} not found" in line
    assert "rabbitmq-server" not in line and "object at 0x" not in line
    assert ":guest@" not in line
