"""The export file format: lossless for every AMQP header type, strict when reading."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from decimal import Decimal

import orjson
import pytest

from rabbitq.dlq import file as dlq_file
from rabbitq.errors import DlqError

HEADERS = {
    "text": "héllo",
    "bytes": bytearray(b"\x00\xff"),
    "int": -5,
    "big": 2**62,
    "float": 1.5,
    "nan": math.nan,
    "bool": False,
    "none": None,
    "decimal": Decimal("10.50"),
    "when": datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC),
    "list": [1, "a", [Decimal("1")]],
    "table": {"a": {"b": bytearray(b"x")}},
    "dollar": {"$bytes": "not a tag", "x": 1},
}


def test_header_values_of_every_type_round_trip():
    back = dlq_file.decode_value(orjson.loads(orjson.dumps(dlq_file.encode_value(HEADERS))))
    assert math.isnan(back.pop("nan"))
    expected = {k: v for k, v in HEADERS.items() if k != "nan"}
    assert back == expected
    assert isinstance(back["bytes"], bytearray)  # what pamqp can publish again


def test_a_record_round_trips_through_one_line():
    record = dlq_file.Record(
        queue="emails.dlq",
        body=bytes(range(256)),
        properties={"message_id": "m", "timestamp": datetime(2024, 1, 1, tzinfo=UTC)},
        headers={"x": bytearray(b"\x01")},
        routing_key="emails.dlq",
    )
    line = dlq_file.dumps(record)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert dlq_file.loads(line, where="f:1") == record


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b"[1, 2]", "f:3: not a rabbitq DLQ export line"),
        (b'{"format": "rabbitq-dlq", "version": 9, "body": ""}', "version 9 is not supported"),
        (b'{"format": "rabbitq-dlq", "version": 1, "body": "!!"}', "f:3: "),
        (
            b'{"format": "rabbitq-dlq", "version": 1, "body": "", "properties": {"colour": "x"}}',
            "unknown property 'colour'",
        ),
        (
            b'{"format": "rabbitq-dlq", "version": 1, "body": "", '
            b'"headers": {"a": {"$nope": "1"}}}',
            "unknown tag '$nope'",
        ),
        (
            b'{"format": "rabbitq-dlq", "version": 1, "body": "", '
            b'"properties": {"priority": 1000}}',
            "property 'priority' must be an integer from 0 to 255",
        ),
    ],
)
def test_a_bad_line_is_one_error_naming_where(line, message):
    with pytest.raises(DlqError, match="^f:3: ") as info:
        dlq_file.loads(line, where="f:3")
    assert message in str(info.value)
    assert "\n" not in str(info.value)
