"""A refused vhost reads as such, with the broker's words (issue 12, item 2)."""

from __future__ import annotations

import pytest
from pamqp import commands

from rabbitq._amqp import refusal

URL = "amqp://app:s3cret@rabbit:5672/shop%2Fprod"


def aiormq_error(text: str) -> str:
    refusal.install()
    frame = commands.Connection.Close(530, text, 0, 0)
    return f"Expected one of ['Connection.OpenOk'], got {frame!r}"


@pytest.mark.parametrize(
    "said",
    ["NOT_ALLOWED - vhost shop/prod not found",
     "NOT_ALLOWED - access to vhost 'shop/prod' refused for user 'app'"],
)  # fmt: skip
def test_a_refused_vhost_is_named_with_what_the_broker_said(said):
    line = refusal.vhost_refusal(URL, aiormq_error(said))
    assert line is not None and "\n" not in line
    assert "refused vhost 'shop/prod'" in line
    assert "user 'app'" in line
    assert f"530 {said}" in line
    assert "s3cret" not in line


def test_other_errors_are_left_alone():
    assert refusal.vhost_refusal(URL, "[Errno 111] Connection refused") is None


@pytest.mark.parametrize(
    ("url", "vhost"),
    [("amqp://h/", "/"), ("amqp://h", "/"), ("amqp://h/%2F", "/"), ("amqp://h/prod", "prod")],
)
def test_the_vhost_is_the_urls_path(url, vhost):
    assert refusal.vhost_of(url) == vhost
