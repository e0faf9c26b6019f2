"""Bytes <-> typed messages: exact round trips, and every bad body a DecodeError('invalid')."""

from __future__ import annotations

import enum
import uuid
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import orjson
import pytest
from pydantic import Field, field_validator

from rabbitq import DecodeError, Message
from rabbitq.message import CONTENT_TYPE, decode, encode


class Currency(enum.Enum):
    EUR = "EUR"
    USD = "USD"


class Priority(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Payment(Message, type="unit.codec.payment"):
    amount: Decimal
    currency: Currency
    priority: Priority = Priority.LOW
    order_id: uuid.UUID
    at: datetime


class Order(Message, type="unit.codec.order"):
    class Line(Message):
        sku: str
        qty: int = Field(gt=0)

    customer: str
    lines: list[Line]


class Anything(Message, type="unit.codec.anything"):
    data: Any = None


class Picky(Message, type="unit.codec.picky"):
    code: str

    @field_validator("code")
    @classmethod
    def code_must_be_known(cls, value: str) -> str:
        # KeyError for other codes: pydantic turns only ValueError and AssertionError
        # into a ValidationError and lets everything else through.
        return {"a": "A", "b": "B"}[value]


def payment(**overrides: Any) -> Payment:
    fields: dict[str, Any] = {
        "amount": Decimal("0.10"),
        "currency": Currency.EUR,
        "priority": Priority.HIGH,
        "order_id": uuid.UUID("12345678-1234-5678-1234-567812345678"),
        "at": datetime(
            2024, 5, 17, 9, 30, 15, 123456, tzinfo=timezone(timedelta(hours=5, minutes=30))
        ),
    }
    return Payment(**{**fields, **overrides})


def test_the_content_type_is_json():
    assert CONTENT_TYPE == "application/json"


def test_a_message_round_trips_exactly():
    original = payment()
    assert decode(encode(original), Payment) == original


@pytest.mark.parametrize(
    "amount", ["0.10", "12345678901234567890.123456789", "-0.000000001", "1E+3", "0"]
)
def test_a_decimal_is_a_json_string_and_keeps_every_digit(amount):
    body = encode(payment(amount=Decimal(amount)))
    assert orjson.loads(body)["amount"] == str(Decimal(amount))
    assert f'"amount":"{Decimal(amount)}"'.encode() in body
    back = decode(body, Payment).amount
    assert str(back) == str(Decimal(amount))
    assert back.as_tuple() == Decimal(amount).as_tuple()


def test_a_decimal_never_becomes_a_float_on_the_wire():
    body = encode(payment(amount=Decimal("0.1")))
    assert isinstance(orjson.loads(body)["amount"], str)


def test_a_timezone_aware_datetime_keeps_its_offset():
    body = encode(payment())
    assert orjson.loads(body)["at"] == "2024-05-17T09:30:15.123456+05:30"
    back = decode(body, Payment).at
    assert back.utcoffset() == timedelta(hours=5, minutes=30)
    assert back == payment().at


def test_a_utc_datetime_stays_utc():
    at = datetime(2024, 1, 1, tzinfo=UTC)
    back = decode(encode(payment(at=at)), Payment).at
    assert back.utcoffset() == timedelta(0)
    assert back == at


def test_uuids_and_enums_travel_as_their_values():
    data = orjson.loads(encode(payment()))
    assert data["order_id"] == "12345678-1234-5678-1234-567812345678"
    assert data["currency"] == "EUR"
    assert data["priority"] == 2
    back = decode(encode(payment()), Payment)
    assert back.order_id == uuid.UUID("12345678-1234-5678-1234-567812345678")
    assert back.currency is Currency.EUR
    assert back.priority is Priority.HIGH


def test_nested_models_round_trip():
    order = Order(customer="ada", lines=[Order.Line(sku="a", qty=1), Order.Line(sku="b", qty=2)])
    assert decode(encode(order), Order) == order


def test_unknown_fields_from_a_newer_producer_are_ignored():
    body = b'{"customer": "ada", "lines": [], "added_in_v2": true}'
    assert decode(body, Order) == Order(customer="ada", lines=[])


@pytest.mark.parametrize(
    "body", [b"not json", b"", b"{", b'{"customer": }', b"\xff\xfe", b"{'single': 'quotes'}"]
)
def test_a_body_that_is_not_json_is_invalid(body):
    with pytest.raises(DecodeError, match="body is not JSON") as info:
        decode(body, Order)
    assert info.value.reason == "invalid"


@pytest.mark.parametrize(
    ("body", "kind"),
    [(b"[]", "list"), (b"[1, 2]", "list"), (b"1", "int"), (b'"text"', "str"), (b"null", "None")],
)
def test_json_that_is_not_an_object_is_invalid(body, kind):
    with pytest.raises(DecodeError, match=f"body is JSON {kind}.*expected an object") as info:
        decode(body, Order)
    assert info.value.reason == "invalid"


def test_a_missing_field_is_invalid_and_named():
    with pytest.raises(DecodeError) as info:
        decode(b'{"lines": []}', Order)
    assert info.value.reason == "invalid"
    assert str(info.value) == "unit.codec.order failed validation: customer: Field required"


def test_a_wrong_nested_value_is_invalid_and_its_path_named():
    with pytest.raises(DecodeError) as info:
        decode(b'{"customer": "ada", "lines": [{"sku": "a", "qty": 0}]}', Order)
    assert info.value.reason == "invalid"
    assert "lines.0.qty: Input should be greater than 0" in str(info.value)


def test_a_float_is_not_silently_accepted_where_an_enum_is_expected():
    body = orjson.dumps({**orjson.loads(encode(payment())), "currency": 1.5})
    with pytest.raises(DecodeError, match="currency"):
        decode(body, Payment)


def test_a_validation_error_does_not_echo_the_input():
    secret = "4111-1111-1111-1111"
    with pytest.raises(DecodeError) as info:
        decode(orjson.dumps({"customer": ["x"], "lines": secret}), Order)
    assert secret not in str(info.value)


def test_a_very_long_validation_error_is_shortened():
    lines = [{"sku": "s", "qty": -1}] * 200
    with pytest.raises(DecodeError) as info:
        decode(orjson.dumps({"customer": "ada", "lines": lines}), Order)
    assert len(str(info.value)) <= 400


def test_a_validator_raising_something_other_than_value_error_is_still_invalid():
    with pytest.raises(DecodeError, match="unit.codec.picky failed validation") as info:
        decode(b'{"code": "zzz"}', Picky)
    assert "KeyError" in str(info.value)
    assert info.value.reason == "invalid"
    assert decode(b'{"code": "a"}', Picky).code == "A"


def test_deeply_nested_json_inside_a_field_decodes():
    depth = 1_000
    body = b'{"data":' + b'{"a":' * depth + b"1" + b"}" * depth + b"}"
    message = decode(body, Anything)
    node = message.data
    for _ in range(depth):
        node = node["a"]
    assert node == 1


@pytest.mark.parametrize(
    "body",
    [b"[" * 100_000, b'{"data":' + b"[" * 100_000, b'{"data":' * 50_000 + b"1" + b"}" * 50_000],
)
def test_pathologically_nested_json_is_invalid_not_a_crash(body):
    with pytest.raises(DecodeError) as info:
        decode(body, Anything)
    assert info.value.reason == "invalid"
