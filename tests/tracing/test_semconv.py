"""The messaging conventions' names, as plain data (rabbitq.tracing.semconv)."""

from __future__ import annotations

import pytest

from rabbitq.ladder.plan import DELIVER_EXCHANGE, PREFIX
from rabbitq.settings import semconv_opt_in
from rabbitq.tracing import semconv


@pytest.mark.parametrize(
    ("exchange", "routing_key", "name"),
    [
        ("direct_logs", "warning", "direct_logs:warning"),  # the convention's own example
        ("rabbitq", "email.send", "rabbitq:email.send"),
        ("", "emails.retry.1s", "emails.retry.1s"),  # the default exchange: the key alone
        ("rabbitq", "", "rabbitq"),
        ("", "", "amq.default"),
    ],
)
def test_a_send_is_named_by_its_exchange_and_routing_key(
    exchange: str, routing_key: str, name: str
) -> None:
    assert semconv.send_destination(exchange, routing_key) == name


@pytest.mark.parametrize(
    ("exchange", "routing_key", "queue", "name"),
    [
        ("direct_logs", "warning", "my_queue", "direct_logs:warning:my_queue"),
        ("rabbitq", "email.send", "emails", "rabbitq:email.send:emails"),
        ("", "emails", "emails", "emails"),  # a retry, sent straight to its queue
        (DELIVER_EXCHANGE, "1.0.1", "emails", f"{DELIVER_EXCHANGE}:1.0.1:emails"),
        ("", "", "emails", "emails"),
    ],
)
def test_a_delivery_is_named_by_its_exchange_routing_key_and_queue(
    exchange: str, routing_key: str, queue: str, name: str
) -> None:
    assert semconv.receive_destination(exchange, routing_key, queue) == name


@pytest.mark.parametrize(
    ("value", "conventions"),
    [
        ("", "current"),
        ("messaging", "current"),
        ("http,messaging/dup", "both"),
        (" messaging/dup ", "both"),
        ("messaging,messaging/dup", "both"),  # dup wins, as the spec says
        ("database/dup", "current"),
    ],
)
def test_the_opt_in_variable_asks_for_both_conventions_with_messaging_dup_only(
    value: str, conventions: str
) -> None:
    assert semconv.from_opt_in(value) == conventions


def test_the_opt_in_variable_is_read_from_the_environment_given() -> None:
    assert semconv_opt_in({"OTEL_SEMCONV_STABILITY_OPT_IN": "messaging/dup"}) == "messaging/dup"
    assert semconv_opt_in({}) == ""


def test_span_names_leave_out_the_delay_ladders_routing_keys_a_delays_bits() -> None:
    assert semconv.LADDER == PREFIX + "."
    assert semconv.span_key(DELIVER_EXCHANGE, "1.0.1.0.0") == ""
    assert semconv.span_key("rabbitq.delay.classic.04", "1.0.1.0.0") == ""
    assert semconv.span_key("rabbitq", "email.send") == "email.send"
