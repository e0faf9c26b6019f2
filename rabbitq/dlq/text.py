"""A dead message's text, made safe to show: everything that comes from a message (body,
headers, even ids) is untrusted, so control characters are escaped (an ANSI sequence or
a ``\\r`` in a payload cannot move the cursor or recolour a terminal) and bidirectional
overrides are written out. Shared by ``rabbitq dlq`` and the operator console.
"""

from __future__ import annotations

import unicodedata
from datetime import datetime
from typing import Any

import orjson

from . import file as dlq_file

# Bidirectional overrides and isolates can make text read differently from what it is.
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_ESCAPED_CATEGORIES = frozenset({"Cc", "Cs", "Zl", "Zp"})
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
MAX_BODY_SHOWN = 64 * 1024
ERROR_WIDTH = 60


def escape(text: str, *, multiline: bool = False) -> str:
    """``text`` with control characters written as escapes (``\\x1b``, ``\\r``,
    ``\\u202e``); with ``multiline``, newlines and tabs are kept."""
    if text.isprintable():
        return text
    out: list[str] = []
    for ch in text:
        if multiline and ch in "\n\t":
            out.append(ch)
        elif ch in _BIDI or unicodedata.category(ch) in _ESCAPED_CATEGORIES:
            code = ord(ch)
            out.append(_NAMED.get(ch) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"))
        else:
            out.append(ch)
    return "".join(out)


def shorten(text: str, width: int) -> str:
    """One line of at most ``width`` characters."""
    line = escape(text)
    return line if len(line) <= width else line[: width - 1] + "…"


def value_text(value: Any) -> str:
    """A header or property value as one escaped line."""
    if isinstance(value, str):
        return escape(value)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, bytes | bytearray):
        try:
            return "bytes " + escape(repr(bytes(value).decode("utf-8")))
        except UnicodeDecodeError:
            return f"bytes 0x{bytes(value).hex()}"
    return escape(orjson.dumps(dlq_file.encode_value(value)).decode())


def body_text(body: bytes) -> tuple[str, str]:
    """``(kind, text)``: the body pretty-printed as JSON, else as text, else in hex."""
    shown = body[:MAX_BODY_SHOWN]
    more = len(body) - len(shown)
    tail = f"\n… {more} more bytes (export the message to see all of it)" if more else ""
    if not more:
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            pass
        else:
            pretty = orjson.dumps(data, option=orjson.OPT_INDENT_2).decode()
            return "json", escape(pretty, multiline=True)
    try:
        return "text", escape(shown.decode("utf-8"), multiline=True) + tail
    except UnicodeDecodeError:
        lines = [shown[i : i + 32].hex(" ") for i in range(0, len(shown), 32)]
        return f"binary, {len(body)} bytes", "\n".join(lines) + tail
