"""A hostile payload cannot rewrite the operator's terminal, and summaries say what
happened."""

from __future__ import annotations

import io

from rich.console import Console

from rabbitq._amqp import headers as h
from rabbitq.cli.common import json_text
from rabbitq.cli.dlq_view import message_detail, message_table, tally_text
from rabbitq.dlq import DeadMessage, Tally
from rabbitq.dlq.text import body_text, escape

HOSTILE = "ok\x1b[2J\x1b]0;owned\x07\r\u202egnp.exe\x9b[31m [bold red]markup[/]"


def render(renderable: object) -> str:
    out = io.StringIO()
    Console(file=out, width=200, force_terminal=True, color_system=None).print(renderable)
    return out.getvalue()


def test_control_characters_are_escaped_and_newlines_kept_only_when_asked():
    assert escape(HOSTILE) == (
        "ok\\x1b[2J\\x1b]0;owned\\x07\\r\\u202egnp.exe\\x9b[31m [bold red]markup[/]"
    )
    assert escape("a\nb\tc", multiline=True) == "a\nb\tc"
    assert escape("a\nb") == "a\\nb"
    assert escape("plain ünïcode ✓") == "plain ünïcode ✓"


def test_show_and_list_print_no_raw_control_character_and_no_markup():
    m = DeadMessage(
        dlq="q.dlq",
        body=HOSTILE.encode(),
        properties={"message_id": HOSTILE, "type": "t"},
        headers={h.ERROR: HOSTILE, h.TRACEBACK: HOSTILE, HOSTILE: b"\x1b[0m"},
    )
    for output in (render(message_detail(m)), render(message_table([m], HOSTILE))):
        assert not any(c in output for c in "\x1b\x07\r\u202e\x9b")
        assert "[bold red]markup[/]" in output


def test_a_body_is_shown_as_json_else_text_else_hex():
    assert body_text(b'{"a": [1]}') == ("json", '{\n  "a": [\n    1\n  ]\n}')
    assert body_text(b"line\x1b") == ("text", "line\\x1b")
    assert body_text(b"\xff\x00") == ("binary, 2 bytes", "ff 00")


def test_json_output_is_ascii_only():
    assert json_text({"e": HOSTILE}).isascii()


def test_the_summary_names_moved_skipped_failed_and_possible_duplicates():
    t = Tally(operation="replay", queue="q.dlq", done=5, skipped=2, possible_duplicates=1)
    t.fail("queue 'x' does not exist")
    text = tally_text(t)
    assert text.startswith("replay q.dlq: moved 5, skipped 2 (not matching, left in q.dlq), ")
    assert "failed 1, possible duplicates 1" in text
    assert "1 failed: queue 'x' does not exist" in text


def test_the_summary_warns_when_other_consumers_held_messages():
    t = Tally(operation="replay", queue="q.dlq", other_consumers=1)
    assert "note: 1 other consumer(s) were reading q.dlq" in tally_text(t)
