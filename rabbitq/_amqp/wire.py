"""Tolerant AMQP decoding: frames that pamqp refuses must not stop a worker.

RabbitMQ passes a message's content header to consumers as the producer wrote it,
without checking its strings or timestamps. pamqp (under aio-pika) raises on a
``shortstr`` (``message_id``, ``type``, a header *name*) that is not UTF-8, on a
timestamp past the year 9999, and on field tables nested deeper than Python's
recursion limit. aiormq then drops the whole connection; the broker redelivers the
message to the reconnected worker, which drops again: one message stops the worker.

:func:`install` swaps those decoders for tolerant ones: undecodable text becomes
U+FFFD, an out-of-range timestamp is clamped to the nearest representable one, and
a table or array nested more than :data:`MAX_DEPTH` levels is replaced by a
placeholder string. For input pamqp accepts, the results are identical. It is called
by :func:`rabbitq._amqp.connection.connect`, so every rabbitq connection has it. It
replaces a slot only while every slot still holds pamqp's own function (pamqp is
pinned to a major version in pyproject.toml; tests/amqp/test_wire_guard.py fails when a
pamqp release changes a function rabbitq replaces); :func:`uninstall` undoes it.

:func:`wire_safe` is the other direction: a header value as decoded (``bytes`` from
a long string that is not UTF-8, a double that a 32-bit float cannot hold, a decimal
pamqp cannot write back) turned into one that pamqp can encode, so that a retry or
DLQ copy can always be published.
"""

from __future__ import annotations

import datetime
import decimal
import logging
import math
import struct
from collections.abc import Callable
from typing import Any

from pamqp import decode

log = logging.getLogger("rabbitq.connection")
MAX_DEPTH = 32
"""Field tables and arrays nested deeper than this are replaced by :data:`TOO_DEEP`."""

TOO_DEEP = "<nested too deeply>"

_UINT32 = struct.Struct(">I")
_UINT64 = struct.Struct(">Q")
_FLOAT32_MAX = 3.4028234663852886e38
_LATEST = datetime.datetime.max.replace(microsecond=0, tzinfo=datetime.UTC)

_installed = False


def short_str(value: bytes) -> tuple[int, str]:
    """A ``shortstr``; bytes that are not UTF-8 become U+FFFD instead of an error."""
    try:
        length = value[0]  # (one byte: what struct's ">B" read, without its call)
    except IndexError as err:
        raise ValueError("Could not unpack short string value") from err
    return length + 1, value[1 : length + 1].decode("utf-8", "replace")


def timestamp(value: bytes) -> tuple[int, datetime.datetime]:
    """A timestamp as pamqp reads it (seconds, or milliseconds past 2106), clamped to
    the years 1970–9999 instead of raising."""
    try:
        seconds: float = _UINT64.unpack(value[0:8])[0]
    except struct.error as err:
        raise ValueError("Could not unpack timestamp value") from err
    if seconds > 0xFFFFFFFF:
        seconds /= 1000.0
    try:
        return 8, datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC)
    except (OverflowError, ValueError, OSError):
        return 8, _LATEST


def _value(value: bytes, depth: int) -> tuple[int, Any]:
    if not value:
        return 0, None
    kind = value[0:1]
    if kind == b"F":
        consumed, result = _table(value[1:], depth + 1)
    elif kind == b"A":
        consumed, result = _array(value[1:], depth + 1)
    elif kind == b"T":
        consumed, result = timestamp(value[1:])
    else:
        try:
            consumed, result = decode.TABLE_MAPPING[kind](value[1:])
        except KeyError as err:
            raise ValueError(f"Unknown type: {kind!r}") from err
    return consumed + 1, result


def _length(value: bytes) -> int:
    try:
        length: int = _UINT32.unpack(value[0:4])[0]
    except struct.error as err:
        raise ValueError("Could not unpack data") from err
    if 4 + length > len(value):
        raise ValueError("Field table length exceeds available data")
    return length


def _table(value: bytes, depth: int) -> tuple[int, Any]:
    length = _length(value)
    end = 4 + length
    if depth > MAX_DEPTH:
        return end, TOO_DEEP
    offset = 4
    data: dict[str, Any] = {}
    while offset < end:
        key_length = value[offset]
        offset += 1
        if offset + key_length > end:
            raise ValueError("Field table key length exceeds data")
        key = value[offset : offset + key_length].decode("utf-8", "replace")
        offset += key_length
        consumed, data[key] = _value(value[offset:], depth)
        offset += consumed
    return end, data


def _array(value: bytes, depth: int) -> tuple[int, Any]:
    length = _length(value)
    end = 4 + length
    if depth > MAX_DEPTH:
        return end, TOO_DEEP
    offset = 4
    data: list[Any] = []
    while offset < end:
        consumed, item = _value(value[offset:], depth)
        offset += consumed
        data.append(item)
    return offset, data


def field_table(value: bytes) -> tuple[int, Any]:
    """A field table (a message's headers); see the module docstring for what differs."""
    return _table(value, 1)


def field_array(value: bytes) -> tuple[int, Any]:
    """A field array, with the same tolerance as :func:`field_table`."""
    return _array(value, 1)


_REPLACEMENTS: dict[str, tuple[bytes | None, Callable[[bytes], tuple[int, Any]]]] = {
    "shortstr": (None, short_str),
    "timestamp": (b"T", timestamp),
    "table": (b"F", field_table),
    "array": (b"A", field_array),
}


# pamqp's own function of each slot we replace, by its name in pamqp.decode.
_PAMQP_NAMES = {
    "shortstr": "short_str",
    "timestamp": "timestamp",
    "table": "field_table",
    "array": "field_array",
}
_saved: dict[tuple[int, Any], Callable[[bytes], tuple[int, Any]]] = {}
_warned = False


def _slots() -> list[tuple[dict[Any, Any], Any, str]]:
    """Every (mapping, key, pamqp name) that :func:`install` replaces."""
    slots: list[tuple[dict[Any, Any], Any, str]] = []
    for name, (tag, _fn) in _REPLACEMENTS.items():
        slots.append((decode.METHODS, name, _PAMQP_NAMES[name]))
        if tag is not None:
            slots.append((decode.TABLE_MAPPING, tag, _PAMQP_NAMES[name]))
    return slots


def foreign_slots() -> list[str]:
    """The slots that hold neither pamqp's own function nor ours (someone else patched
    them, or a pamqp release changed them): :func:`install` leaves pamqp alone then."""
    replacements = {fn for _tag, fn in _REPLACEMENTS.values()}
    return [
        f"{'METHODS' if mapping is decode.METHODS else 'TABLE_MAPPING'}[{key!r}]"
        for mapping, key, own in _slots()
        if mapping.get(key) is not getattr(decode, own, None)
        and mapping.get(key) not in replacements
    ]


def installed() -> bool:
    """Whether pamqp decodes with the tolerant functions now."""
    return _installed


def install() -> bool:
    """Make pamqp (so aio-pika) decode with the tolerant functions above; True if it
    does. Idempotent.

    Only when every slot still holds pamqp's own function: otherwise it logs once and
    leaves pamqp as it is (a malformed frame then drops the connection, as it would
    without rabbitq).
    """
    global _installed, _warned
    if _installed:
        return True
    foreign = foreign_slots()
    if foreign:
        if not _warned:
            _warned = True
            log.warning(
                "not installing rabbitq's tolerant AMQP decoding: pamqp's %s no longer "
                "hold pamqp's own functions (another patch, or a pamqp release rabbitq does "
                "not know); a malformed frame will drop the connection",
                ", ".join(foreign),
            )
        return False
    for mapping, key, _own in _slots():
        _saved[(id(mapping), key)] = mapping[key]
    for name, (tag, fn) in _REPLACEMENTS.items():
        decode.METHODS[name] = fn
        if tag is not None:
            decode.TABLE_MAPPING[tag] = fn
    _installed = True
    return True


def uninstall() -> None:
    """Put pamqp's own decoders back (for tests). Idempotent."""
    global _installed
    if not _installed:
        return
    for mapping, key, _own in _slots():
        mapping[key] = _saved.pop((id(mapping), key))
    _installed = False


def wire_safe(value: Any) -> Any:
    """``value`` (a decoded header value) in a form pamqp can encode again."""
    if isinstance(value, bool | str | bytearray | datetime.datetime) or value is None:
        return value
    if isinstance(value, bytes):
        return bytearray(value)  # a long string that was not UTF-8: keep its bytes
    if isinstance(value, int):
        return value if -(2**63) <= value < 2**63 else str(value)
    if isinstance(value, float):
        # pamqp writes every float as 32 bits: a larger finite double cannot be written
        return value if not math.isfinite(value) or abs(value) <= _FLOAT32_MAX else repr(value)
    if isinstance(value, decimal.Decimal):
        return value if _decimal_fits(value) else str(value)
    if isinstance(value, dict):
        return {str(k): wire_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [wire_safe(v) for v in value]
    return str(value)


def _decimal_fits(value: decimal.Decimal) -> bool:
    sign, digits, exponent = value.as_tuple()
    if not isinstance(exponent, int):  # NaN, Infinity
        return False
    if exponent > 0:
        mantissa, scale = int(value), 0
    else:
        mantissa, scale = int(value.scaleb(-exponent)), -exponent
    return 0 <= scale <= 255 and -(2**31) <= mantissa < 2**31
