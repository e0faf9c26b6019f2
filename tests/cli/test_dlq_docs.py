"""docs/dlq.md shows what ``rabbitq dlq list`` prints, at 80 columns (issue 12, item 6)."""

from __future__ import annotations

import io
import re
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console

from rabbitq._amqp import headers as h
from rabbitq.cli.dlq_view import message_table
from rabbitq.dlq import DeadMessage, Filters

ROOT = Path(__file__).resolve().parents[2]
IDS = {"4f1c0e9d2b6a4e0c8f7a1b2c3d4e5f60": 3, "9a02b7c41e3f4d5a8b6c7d8e9f0a1b2c": 4}


def dead(message_id: str, second: int) -> DeadMessage:
    failed = datetime(2024, 5, 1, 9, 12, second, tzinfo=UTC)
    headers = h.dead_letter_headers(
        {}, reason="exhausted", error="TimeoutError: smtp timed out after 30 s",
        traceback=None, queue="emails", attempt=5, exchange="rabbitq",
        routing_key="email.send", failed_at=failed,
    )  # fmt: skip
    return DeadMessage(
        dlq="emails.dlq",
        body=b"{}",
        properties={"message_id": message_id, "type": "email.send"},
        headers=headers,
    )


def documented() -> tuple[str, str]:
    text = (ROOT / "docs/dlq.md").read_text()
    section = text.split("### list", 1)[1]
    block = re.search(r"```console\n(.*?)```", section, flags=re.S)[1]
    command, _, output = block.partition("\n")
    return command, output


def test_the_list_example_is_what_the_tool_prints_at_80_columns():
    command, output = documented()
    assert command == "$ rabbitq dlq list emails --reason exhausted"
    out = io.StringIO()
    console = Console(file=out, width=80, color_system=None, highlight=False)
    what = Filters.build(reasons=["exhausted"]).describe()
    console.print(
        message_table(
            [dead(mid, s) for mid, s in IDS.items()],
            f"emails.dlq: 2 message(s) matching {what}",
            width=80,
        )
    )
    printed = "\n".join(line.rstrip() for line in out.getvalue().splitlines())
    assert printed.strip() == "\n".join(line.rstrip() for line in output.splitlines()).strip()
    for mid in IDS:
        assert mid in output


def test_the_show_example_uses_an_id_from_the_list():
    text = (ROOT / "docs/dlq.md").read_text()
    shown = re.findall(r"\$ rabbitq dlq show emails (\S+)", text)
    assert shown and all(any(mid.startswith(s) for mid in IDS) for s in shown)
