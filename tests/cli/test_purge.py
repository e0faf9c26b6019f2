"""``rabbitq purge MODULE:APP``: the app's main queue emptied, through the real command
against the real broker (its retry queues and DLQ left alone)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.helpers import ROOT, assert_one_line_error, run_cli

pytestmark = pytest.mark.services

SERVICE = """
from rabbitq import App, Message


class Ping(Message, type="{queue}.ping"):
    n: int


app = App(queue="{queue}", exchange="{queue}.x")  # its own: --delete removes it


@app.handler(Ping)
async def ping(msg: Ping) -> None:
    pass
"""


@pytest.fixture
def service(tmp_path: Path):
    """An app whose main queue holds 3 messages; its queues deleted afterwards."""
    queue = f"t.purge.{uuid.uuid4().hex[:8]}"
    (tmp_path / "service.py").write_text(SERVICE.format(queue=queue))
    assert run_cli("topology", "service:app", cwd=tmp_path).returncode == 0
    for n in range(3):
        published = run_cli("publish", "service:app", f"{queue}.ping", f'{{"n": {n}}}',
                            cwd=tmp_path)  # fmt: skip
        assert published.returncode == 0, published.stderr
    yield tmp_path, queue
    run_cli("topology", "service:app", "--delete", "--force", cwd=tmp_path)


def depth(cwd: Path) -> int:
    """The main queue's depth, as ``rabbitq stats --json`` reads it (one JSON array)."""
    result = run_cli("stats", "service:app", "--json", cwd=cwd)
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    (main,) = [r for r in rows if r["kind"] == "main"]
    return int(main["messages"])


def test_a_dry_run_prints_the_count_and_deletes_nothing(service):
    cwd, queue = service
    result = run_cli("purge", "service:app", "--dry-run", cwd=cwd)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{queue}: 3 message(s) would be purged (dry run: nothing deleted)\n"
    assert depth(cwd) == 3


def test_off_a_terminal_without_yes_it_exits_2_in_one_line_and_deletes_nothing(service):
    cwd, _ = service
    result = run_cli("purge", "service:app", cwd=cwd)
    line = assert_one_line_error(result, exit_code=2)
    assert "refusing to purge without --yes when not on a terminal" in line
    assert depth(cwd) == 3


def test_yes_purges_the_main_queue_and_prints_how_many_went(service):
    cwd, queue = service
    result = run_cli("purge", "service:app", "--yes", cwd=cwd)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{queue}: 3 message(s) purged\n"
    assert depth(cwd) == 0


@pytest.mark.parametrize(("answer", "left"), [("y", 0), ("n", 3)])
def test_on_a_terminal_it_asks_first(service, answer, left):
    cwd, queue = service
    primary, secondary = os.openpty()  # stdin a terminal, as a person runs it
    env = {k: v for k, v in os.environ.items() if k != "RABBITQ_URL"}
    env.update(NO_COLOR="1", PYTHONPATH=str(ROOT))
    try:
        os.write(primary, f"{answer}\n".encode())
        result = subprocess.run(
            [sys.executable, "-m", "rabbitq", "purge", "service:app"],
            cwd=cwd, env=env, stdin=secondary, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        os.close(primary)
        os.close(secondary)
    assert f"Delete the 3 message(s) waiting in {queue} for good?" in result.stdout
    assert result.returncode == (0 if answer == "y" else 1), result.stderr
    assert depth(cwd) == left


def test_an_app_whose_queue_was_never_declared_is_a_one_line_error(tmp_path):
    (tmp_path / "service.py").write_text(SERVICE.format(queue=f"t.purge.{uuid.uuid4().hex}"))
    line = assert_one_line_error(run_cli("purge", "service:app", "--yes", cwd=tmp_path))
    assert "does not exist: nothing to purge" in line
