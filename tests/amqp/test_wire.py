"""Tolerant decoding of what other producers put on the wire, and copies that can always
be encoded again (``rabbitq._amqp.wire``). Property-based: hypothesis writes the frames."""

from __future__ import annotations

import datetime
import decimal
import importlib.util
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pamqp import commands, encode, header
from pamqp import decode as pamqp_decode

from rabbitq._amqp import headers as h
from rabbitq._amqp import wire

# pamqp's decoder as shipped, in a module of its own that install() never touches.
_spec = importlib.util.spec_from_file_location("pristine_decode", pamqp_decode.__file__)
assert _spec is not None and _spec.loader is not None
pristine = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pristine)

FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# -- values pamqp can encode (what well-behaved producers send) -------------------------

scalars = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(width=32, allow_nan=False),
    st.text(max_size=20),
    st.binary(max_size=20).map(bytearray),
    st.none(),
    st.datetimes(
        min_value=datetime.datetime(1970, 1, 2), max_value=datetime.datetime(2100, 1, 1)
    ).map(lambda d: d.replace(microsecond=0, tzinfo=datetime.UTC)),
    st.decimals(min_value=-(10**6), max_value=10**6, places=2, allow_nan=False),
)
keys = st.text(min_size=1, max_size=12).filter(lambda k: len(k.encode()) <= 128)
tables = st.recursive(
    st.dictionaries(keys, scalars, max_size=4),
    lambda inner: st.dictionaries(keys, st.one_of(scalars, inner, st.lists(inner, max_size=3))),
    max_leaves=20,
)


@FAST
@given(tables)
def test_for_any_table_pamqp_accepts_the_tolerant_decoder_reads_the_same(table):
    raw = encode.field_table(table)
    assert wire.field_table(raw) == pristine.field_table(raw)


# -- raw field tables as a hostile producer may write them ------------------------------


def _table(items: list[bytes]) -> bytes:
    body = b"".join(items)
    return struct.pack(">I", len(body)) + body


def _short(raw: bytes) -> bytes:
    return bytes([len(raw)]) + raw


hostile_scalar = st.one_of(
    st.binary(max_size=12).map(lambda b: b"S" + struct.pack(">I", len(b)) + b),  # not UTF-8
    st.integers(0, 2**64 - 1).map(lambda n: b"T" + struct.pack(">Q", n)),  # any timestamp
    st.tuples(st.integers(0, 255), st.integers(0, 2**32 - 1)).map(
        lambda t: b"D" + struct.pack(">BI", *t)  # pamqp reads an unsigned mantissa
    ),
    st.floats(allow_nan=True).map(lambda f: b"d" + struct.pack(">d", f)),  # a double
    st.integers(0, 2**64 - 1).map(lambda n: b"l" + struct.pack(">Q", n)),
    st.binary(max_size=12).map(lambda b: b"x" + struct.pack(">I", len(b)) + b),
    st.just(b"V"),
    st.integers(-128, 127).map(lambda n: b"b" + struct.pack(">b", n)),
)


def hostile_value(depth: int) -> st.SearchStrategy[bytes]:
    if depth == 0:
        return hostile_scalar
    inner = hostile_value(depth - 1)
    return st.one_of(
        hostile_scalar,
        st.lists(st.tuples(st.binary(max_size=8), inner), max_size=3).map(
            lambda items: b"F" + _table([_short(k) + v for k, v in items])
        ),
        st.lists(inner, max_size=3).map(lambda items: b"A" + _table(items)),
    )


hostile_tables = st.lists(st.tuples(st.binary(max_size=8), hostile_value(3)), max_size=5).map(
    lambda items: _table([_short(k) + v for k, v in items])
)


@FAST
@given(hostile_tables)
def test_any_table_is_decoded_and_its_copy_can_be_encoded_again(raw):
    consumed, table = wire.field_table(raw)
    assert consumed == len(raw)
    copy = h.retry_headers(table, next_attempt=2, error="E: x", exchange="x", routing_key="k")
    encode.field_table(copy)  # raises if a copy of this message could not be published


def nested(depth: int) -> bytes:
    raw = _table([])
    for _ in range(depth):
        raw = _table([_short(b"n") + b"F" + raw])
    return raw


@pytest.mark.parametrize("depth", [wire.MAX_DEPTH + 1, 5000])
def test_a_table_nested_too_deeply_is_cut_off_instead_of_overflowing_the_stack(depth):
    _, table = wire.field_table(nested(depth))
    level = 1
    while isinstance(table, dict):
        table = table["n"]
        level += 1
    assert table == wire.TOO_DEEP
    assert level == wire.MAX_DEPTH + 1
    encode.field_table(
        h.retry_headers({"n": table}, next_attempt=2, error="", exchange="", routing_key="")
    )


def test_a_table_nested_within_the_limit_is_read_whole():
    _, table = wire.field_table(nested(wire.MAX_DEPTH - 1))
    assert wire.TOO_DEEP not in repr(table)


def test_a_short_string_that_is_not_utf8_is_read_with_replacement_characters():
    assert wire.short_str(_short(b"id-\xff\xfe")) == (6, "id-\ufffd\ufffd")


@pytest.mark.parametrize("value", [2**64 - 1, 2**63, 253402300800 * 1000 + 1])
def test_a_timestamp_past_the_year_9999_is_clamped(value):
    consumed, when = wire.timestamp(struct.pack(">Q", value))
    assert consumed == 8 and when.year == 9999
    encode.timestamp(when)


def test_an_ordinary_timestamp_is_read_as_pamqp_reads_it():
    raw = struct.pack(">Q", 1_700_000_000)
    assert wire.timestamp(raw) == pristine.timestamp(raw)


@pytest.mark.parametrize("truncated", [b"", b"\x00\x00", b"\x00\x00\x00\x09\x01k"])
def test_a_truncated_table_is_still_an_error(truncated):
    with pytest.raises(ValueError):
        wire.field_table(truncated)


def test_install_makes_a_content_header_with_hostile_properties_decodable():
    wire.install()
    props = commands.Basic.Properties(message_id="MID", timestamp=datetime.datetime(2020, 1, 1))
    raw = header.ContentHeader(0, 3, props).marshal()
    raw = raw.replace(_short(b"MID"), _short(b"\xffID"))
    raw = raw.replace(struct.pack(">Q", 1577836800), struct.pack(">Q", 2**64 - 1))
    parsed = header.ContentHeader()
    parsed.unmarshal(raw)
    assert parsed.properties.message_id == "\ufffdID"
    assert parsed.properties.timestamp.year == 9999


@pytest.mark.parametrize(
    ("value", "safe"),
    [
        (b"\xff", bytearray(b"\xff")),
        (1e300, "1e+300"),
        (float("inf"), float("inf")),
        (2**70, str(2**70)),
        (decimal.Decimal("42949672.95"), "42949672.95"),
        (decimal.Decimal("NaN"), "NaN"),
        (decimal.Decimal("1.5"), decimal.Decimal("1.5")),
        ((1, b"x"), [1, bytearray(b"x")]),
        ({"a": {"b": b"y"}}, {"a": {"b": bytearray(b"y")}}),
        (object, str(object)),
    ],
)
def test_wire_safe_turns_what_pamqp_cannot_write_into_what_it_can(value, safe):
    assert wire.wire_safe(value) == safe
    encode.encode_table_value(wire.wire_safe(value))
