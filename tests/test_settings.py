"""Settings: the environment is read in one place, and passwords never leave it."""

from __future__ import annotations

import dataclasses

import pytest

from rabbitq.settings import (
    DEFAULT_URL,
    URL_ENV,
    Settings,
    redact_url,
    resolve_url,
    url_password,
)


def test_the_url_comes_from_rabbitq_url():
    settings = Settings.from_env({"RABBITQ_URL": "amqp://app:pw@rabbit:5672/prod"})
    assert settings.url == "amqp://app:pw@rabbit:5672/prod"


def test_without_rabbitq_url_the_local_broker_is_used():
    assert Settings.from_env({}).url == DEFAULT_URL == "amqp://guest:guest@localhost:5672/"


def test_an_empty_rabbitq_url_counts_as_unset():
    assert Settings.from_env({URL_ENV: ""}).url == DEFAULT_URL


def test_from_env_reads_the_process_environment_by_default(monkeypatch):
    monkeypatch.setenv("RABBITQ_URL", "amqp://from-env/")
    assert Settings.from_env().url == "amqp://from-env/"
    monkeypatch.delenv("RABBITQ_URL")
    assert Settings.from_env().url == DEFAULT_URL


def test_settings_are_frozen_and_keyword_only():
    settings = Settings(url="amqp://x/")
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.url = "amqp://y/"  # type: ignore[misc]
    with pytest.raises(TypeError):
        Settings("amqp://x/")  # type: ignore[call-arg]


def test_resolve_url_prefers_the_given_url(monkeypatch):
    monkeypatch.setenv("RABBITQ_URL", "amqp://from-env/")
    assert resolve_url("amqp://given/") == "amqp://given/"


def test_resolve_url_falls_back_to_the_environment_then_the_default(monkeypatch):
    monkeypatch.setenv("RABBITQ_URL", "amqp://from-env/")
    assert resolve_url(None) == "amqp://from-env/"
    assert resolve_url("") == "amqp://from-env/"
    monkeypatch.delenv("RABBITQ_URL")
    assert resolve_url(None) == DEFAULT_URL


@pytest.mark.parametrize(
    ("url", "redacted"),
    [
        ("amqp://guest:guest@localhost:5672/", "amqp://guest:***@localhost:5672/"),
        ("amqps://app:s3cret@rabbit.example.com/prod", "amqps://app:***@rabbit.example.com/prod"),
        ("amqp://app:s3cret@rabbit/%2F?heartbeat=30", "amqp://app:***@rabbit/%2F?heartbeat=30"),
        ("amqp://app:p%40ss@rabbit:5672/", "amqp://app:***@rabbit:5672/"),
        ("amqp://app:p@ss@rabbit:5672/", "amqp://app:***@rabbit:5672/"),
        ("amqp://app:@rabbit/", "amqp://app:***@rabbit/"),
        ("amqp://:pw@rabbit/", "amqp://:***@rabbit/"),
        ("amqp://app:pw@[::1]:5672/", "amqp://app:***@[::1]:5672/"),
        ("amqp://app:pw@[2001:db8::7]/vhost", "amqp://app:***@[2001:db8::7]/vhost"),
        ("amqp://app:pw@Rabbit.Example.COM/", "amqp://app:***@Rabbit.Example.COM/"),
    ],
)
def test_redact_url_replaces_the_password(url, redacted):
    assert redact_url(url) == redacted


@pytest.mark.parametrize(
    "url",
    [
        "amqp://localhost:5672/",
        "amqp://app@rabbit/",
        "amqp://[::1]:5672/",
        "amqp:///",
        "not a url",
        "",
    ],
)
def test_a_url_without_a_password_is_left_as_it_is(url):
    assert redact_url(url) == url


@pytest.mark.parametrize("url", ["amqp://app:s3cret@rabbit:99999/", "amqp://app:s3cret@rabbit:x/"])
def test_a_url_with_a_bad_port_is_still_redacted(url):
    redacted = redact_url(url)
    assert "s3cret" not in redacted
    assert redacted.startswith("amqp://app:***@rabbit")


def test_url_password_finds_the_password_to_scrub():
    assert url_password("amqp://app:s3cret@rabbit/") == "s3cret"
    assert url_password("amqp://rabbit/") is None


# -- TLS files and the broker's consumer_timeout ---------------------------------------


def test_tls_files_and_the_consumer_timeout_are_read_from_the_environment():
    from rabbitq.settings import TLS, Settings

    settings = Settings.from_env(
        {
            "RABBITQ_TLS_CA": "/etc/ca.pem",
            "RABBITQ_TLS_CERT": "/etc/client.pem",
            "RABBITQ_TLS_KEY": "/etc/client.key",
            "RABBITQ_CONSUMER_TIMEOUT": "3600",
        }
    )
    assert settings.tls == TLS(ca="/etc/ca.pem", cert="/etc/client.pem", key="/etc/client.key")
    assert settings.consumer_timeout == 3600
    assert Settings.from_env({}).tls == TLS() and Settings.from_env({}).consumer_timeout is None


@pytest.mark.parametrize("value", ["soon", "-1", "30m"])
def test_a_consumer_timeout_that_is_not_seconds_is_a_configuration_error(value):
    from rabbitq import ConfigurationError
    from rabbitq.settings import Settings

    with pytest.raises(ConfigurationError, match="RABBITQ_CONSUMER_TIMEOUT must be seconds"):
        Settings.from_env({"RABBITQ_CONSUMER_TIMEOUT": value})


def test_an_amqps_url_gets_an_ssl_context_that_checks_the_host_and_a_plain_one_none():
    import ssl

    from rabbitq.settings import TLS, ssl_context_for

    context = ssl_context_for("amqps://u:p@broker:5671/", TLS())
    assert context is not None
    assert context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    assert ssl_context_for("amqp://u:p@broker:5672/", TLS()) is None


def test_tls_files_with_an_amqp_url_are_an_error_that_hides_the_password():
    from rabbitq import ConfigurationError
    from rabbitq.settings import TLS, ssl_context_for

    with pytest.raises(ConfigurationError) as caught:
        ssl_context_for("amqp://u:hunter2secret@broker/", TLS(ca="/etc/ca.pem"))
    assert "not amqps://" in str(caught.value) and "hunter2secret" not in str(caught.value)


def test_a_tls_key_without_its_certificate_is_an_error():
    from rabbitq import ConfigurationError
    from rabbitq.settings import TLS

    with pytest.raises(ConfigurationError, match="key was given without its certificate"):
        TLS(key="/etc/client.key").context()


def test_the_management_api_is_read_from_the_environment_and_can_be_turned_off():
    from rabbitq.settings import Settings

    url = "http://rabbit:15672"
    assert Settings.from_env({"RABBITQ_MANAGEMENT_URL": url}).management_url == url
    assert Settings.from_env({"RABBITQ_MANAGEMENT_URL": "off"}).management_url == "off"
    assert Settings.from_env({}).management_url is None
