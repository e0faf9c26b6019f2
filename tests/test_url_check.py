"""A broker URL is checked once, before anything connects: amqp/amqps, a host, one line."""

from __future__ import annotations

import pytest

from rabbitq.errors import ConfigurationError
from rabbitq.settings import TLS, check_url, resolve_url, ssl_context_for, url_problem


@pytest.mark.parametrize(
    "url",
    [
        "amqp://guest:guest@localhost:5672/",
        "amqps://broker.example.com/prod",
        "AMQP://h/",
        "amqp://[::1]:5672/",
        "amqp://h",
        "amqp://guest:guest@127.0.0.1:5672/novhost?heartbeat=5",
    ],
)
def test_a_usable_url_has_no_problem(url):
    assert url_problem(url) is None
    assert check_url(url) == url


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("localhost:5672", "no scheme"),
        ("guest:guest@localhost", "no scheme"),
        ("garbage", "no scheme"),
        ("amqp:///", "no host"),
        ("amqp://:5672/", "no host"),
        ("http://localhost:5672/", "not AMQP"),
        ("https://localhost/", "not AMQP"),
        ("amqp://h:abc/", "port"),
        ("amqp://h:99999/", "port"),
        ("", "empty"),
        ("amqp://h /", "white space"),
    ],
)
def test_a_url_rabbitq_cannot_use_gets_one_line_saying_what_is_wrong(url, words):
    problem = url_problem(url)
    assert problem is not None and words in problem
    with pytest.raises(ConfigurationError) as caught:
        check_url(url)
    assert "\n" not in str(caught.value)
    assert str(caught.value).startswith("invalid broker URL")


@pytest.mark.parametrize(
    "url",
    ["guest:s3cret@localhost", "http://guest:s3cret@h/", "amqp://guest:s3cret@h:abc/"],
)
def test_the_error_never_shows_the_password(url):
    with pytest.raises(ConfigurationError) as caught:
        check_url(url)
    assert "s3cret" not in str(caught.value)
    assert "guest:***@" in str(caught.value)


def test_resolve_url_checks_the_environments_url_too(monkeypatch):
    monkeypatch.setenv("RABBITQ_URL", "localhost:5672")
    with pytest.raises(ConfigurationError, match="no scheme"):
        resolve_url(None)


def test_every_connection_checks_its_url_first():
    # connection.connect() and connect_once() build their options with ssl_context_for
    with pytest.raises(ConfigurationError, match="not AMQP"):
        ssl_context_for("http://h/", TLS())
