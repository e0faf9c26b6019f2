"""The DLQ export file: one JSON object per line, lossless for body, properties and headers.

Each line stands alone (files can be concatenated)::

    {"format": "rabbitq-dlq", "version": 1, "queue": "emails.dlq",
     "exchange": "", "routing_key": "emails.dlq",
     "properties": {"message_id": "...", "timestamp": "2024-05-01T10:00:00+00:00", ...},
     "headers": {"rabbitq-reason": "exhausted", "x-death": [{...}], ...},
     "body": "<base64>"}

``properties`` holds only the properties that are set. Header values that JSON cannot
hold exactly are tagged: ``{"$bytes": "<base64>"}``, ``{"$decimal": "1.50"}``,
``{"$datetime": "<ISO 8601>"}``, ``{"$float": "nan"}``, and a table whose own keys start
with ``$`` is wrapped as ``{"$table": {...}}`` so that it cannot pass for a tag.
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

import orjson

from ..errors import DlqError

FORMAT = "rabbitq-dlq"
VERSION = 1

# AMQP basic properties, by their aio-pika names; ``headers`` is kept apart.
PROPERTY_TYPES: dict[str, type] = {
    "content_type": str,
    "content_encoding": str,
    "delivery_mode": int,
    "priority": int,
    "correlation_id": str,
    "reply_to": str,
    "expiration": str,  # milliseconds, as on the wire
    "message_id": str,
    "timestamp": datetime,
    "type": str,
    "user_id": str,
    "app_id": str,
}


@dataclass(frozen=True, kw_only=True)
class Record:
    """One message as stored in an export file."""

    queue: str
    body: bytes
    properties: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, Any] = field(default_factory=dict)
    exchange: str = ""
    routing_key: str = ""


# ---------------------------------------------------------------- header values


def encode_value(value: Any) -> Any:
    """A header value as JSON-ready data, tagged where JSON would lose something."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"$float": repr(value)}
    if isinstance(value, bytes | bytearray | memoryview):
        return {"$bytes": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, Decimal):
        return {"$decimal": str(value)}
    if isinstance(value, datetime):
        return {"$datetime": value.isoformat()}
    if isinstance(value, list | tuple):
        return [encode_value(v) for v in value]
    if isinstance(value, Mapping):
        table = {str(k): encode_value(v) for k, v in value.items()}
        return {"$table": table} if any(k.startswith("$") for k in table) else table
    raise TypeError(f"cannot export a header value of type {type(value).__name__}")


def decode_value(data: Any) -> Any:
    """The inverse of :func:`encode_value`; raises ValueError on anything else."""
    if data is None or isinstance(data, bool | str | int | float):
        return data
    if isinstance(data, list):
        return [decode_value(v) for v in data]
    if not isinstance(data, dict):
        raise ValueError(f"unexpected JSON value {data!r}")
    tags = [k for k in data if k.startswith("$")]
    if not tags:
        return {k: decode_value(v) for k, v in data.items()}
    if len(data) != 1:
        raise ValueError(f"a tagged value has exactly one key, not {sorted(data)}")
    tag, raw = tags[0], data[tags[0]]
    if tag == "$table" and isinstance(raw, dict):
        return {k: decode_value(v) for k, v in raw.items()}
    if not isinstance(raw, str):
        raise ValueError(f"{tag} needs a string, not {raw!r}")
    try:
        if tag == "$bytes":  # pamqp writes a bytearray (not bytes) as an AMQP byte array
            return bytearray(base64.b64decode(raw, validate=True))
        if tag == "$decimal":
            return Decimal(raw)
        if tag == "$datetime":
            return datetime.fromisoformat(raw)
        if tag == "$float":
            return float(raw)
    except (binascii.Error, InvalidOperation, ValueError) as exc:
        raise ValueError(f"bad {tag} value {raw!r}") from exc
    raise ValueError(f"unknown tag {tag!r}")


# ---------------------------------------------------------------- lines


def _property_json(name: str, value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


def dumps(record: Record) -> bytes:
    """One line (with its newline) for ``record``."""
    line = {
        "format": FORMAT,
        "version": VERSION,
        "queue": record.queue,
        "exchange": record.exchange,
        "routing_key": record.routing_key,
        "properties": {
            k: _property_json(k, v) for k, v in record.properties.items() if v is not None
        },
        "headers": encode_value(record.headers or {}),
        "body": base64.b64encode(record.body).decode(),
    }
    return orjson.dumps(line) + b"\n"


def _properties(data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ValueError("'properties' must be an object")
    out: dict[str, Any] = {}
    for name, value in data.items():
        kind = PROPERTY_TYPES.get(name)
        if kind is None:
            raise ValueError(f"unknown property {name!r}")
        if value is None:
            continue
        if kind is datetime:
            if not isinstance(value, str):
                raise ValueError(f"property {name!r} must be an ISO 8601 string")
            value = datetime.fromisoformat(value)
        elif kind is int:
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 255:
                raise ValueError(f"property {name!r} must be an integer from 0 to 255")
        elif not isinstance(value, str):
            raise ValueError(f"property {name!r} must be a string")
        out[name] = value
    return out


def loads(line: bytes, *, where: str) -> Record:
    """The record on one line; ``where`` (``file:line``) starts every error message."""
    try:
        data = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise DlqError(f"{where}: not valid JSON ({exc.msg})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise DlqError(
            f'{where}: not a rabbitq DLQ export line (no "format": "{FORMAT}"); '
            "write files with 'rabbitq dlq export'"
        )
    version = data.get("version")
    if version != VERSION:
        raise DlqError(
            f"{where}: format version {version!r} is not supported (this rabbitq reads "
            f"version {VERSION})"
        )
    try:
        body = data["body"]
        if not isinstance(body, str):
            raise ValueError("'body' must be a base64 string")
        headers = decode_value(data.get("headers") or {})
        if not isinstance(headers, dict):
            raise ValueError("'headers' must be an object")
        texts = {k: data.get(k, "") for k in ("queue", "exchange", "routing_key")}
        if not all(isinstance(v, str) for v in texts.values()):
            raise ValueError("'queue', 'exchange' and 'routing_key' must be strings")
        return Record(
            body=base64.b64decode(body, validate=True),
            properties=_properties(data.get("properties") or {}),
            headers=headers,
            **texts,
        )
    except KeyError as exc:
        raise DlqError(f"{where}: missing field {exc.args[0]!r}") from None
    except (ValueError, binascii.Error) as exc:
        raise DlqError(f"{where}: {exc}") from None
