"""Connection settings: the one place that reads the environment.

Everything else receives a URL (or a :class:`Settings`) as a plain argument, so that
importing rabbitq has no side effects and tests can run many apps side by side.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import quote, urlsplit, urlunsplit

from .errors import ConfigurationError

DEFAULT_URL = "amqp://guest:guest@localhost:5672/"
URL_ENV = "RABBITQ_URL"
TLS_CA_ENV = "RABBITQ_TLS_CA"
TLS_CERT_ENV = "RABBITQ_TLS_CERT"
TLS_KEY_ENV = "RABBITQ_TLS_KEY"
CONSUMER_TIMEOUT_ENV = "RABBITQ_CONSUMER_TIMEOUT"


@dataclass(frozen=True, kw_only=True)
class TLS:
    """Files for an ``amqps://`` connection (PEM).

    ``ca``: the CA bundle that signed the broker's certificate (default: the system's
    trust store). ``cert`` and ``key``: a client certificate and its unencrypted key,
    for brokers that verify their clients (``ssl_options.fail_if_no_peer_cert``).
    The broker's host name is always checked against its certificate.
    """

    ca: str | None = None
    cert: str | None = None
    key: str | None = None

    @property
    def configured(self) -> bool:
        """Whether any file was given."""
        return bool(self.ca or self.cert or self.key)

    def context(self) -> ssl.SSLContext:
        """The SSL context: verify the broker (and present our certificate, if any)."""
        if self.key and not self.cert:
            raise ConfigurationError("a TLS key was given without its certificate (--tls-cert)")
        for label, path in (("CA", self.ca), ("certificate", self.cert), ("key", self.key)):
            if path and not os.path.isfile(path):
                raise ConfigurationError(f"TLS {label} file not found: {path}")
        try:
            context = ssl.create_default_context(cafile=self.ca or None)
            if self.cert:
                context.load_cert_chain(self.cert, self.key or None)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigurationError(
                f"cannot load the TLS files (CA {self.ca or 'system'}, cert {self.cert or '-'}, "
                f"key {self.key or '-'}): {exc.strerror or exc}"
            ) from exc
        return context


def _seconds(name: str, value: str | None) -> float | None:
    if value is None or not value.strip():
        return None
    try:
        seconds = float(value)
    except ValueError:
        raise ConfigurationError(f"${name} must be seconds (0: none), not {value!r}") from None
    if seconds < 0:
        raise ConfigurationError(f"${name} must be seconds (0: none), not {value!r}")
    return seconds


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Where the broker is and how to reach it. Build it with :meth:`from_env` or pass
    the fields yourself. ``consumer_timeout``: the broker's, in seconds, if you know it
    (``0``: it has none; ``None``: assume RabbitMQ's default, see ``rabbitq.limits``)."""

    url: str = DEFAULT_URL
    tls: TLS = field(default_factory=TLS)
    consumer_timeout: float | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read ``$RABBITQ_URL`` (default: the local broker as guest), ``$RABBITQ_TLS_CA``,
        ``$RABBITQ_TLS_CERT``, ``$RABBITQ_TLS_KEY`` and ``$RABBITQ_CONSUMER_TIMEOUT``."""
        env = os.environ if environ is None else environ
        return cls(
            url=env.get(URL_ENV) or DEFAULT_URL,
            tls=TLS(
                ca=env.get(TLS_CA_ENV) or None,
                cert=env.get(TLS_CERT_ENV) or None,
                key=env.get(TLS_KEY_ENV) or None,
            ),
            consumer_timeout=_seconds(CONSUMER_TIMEOUT_ENV, env.get(CONSUMER_TIMEOUT_ENV)),
        )


def resolve_url(url: str | None) -> str:
    """The given URL, else ``$RABBITQ_URL``, else the local broker."""
    return url or Settings.from_env().url


def resolve_tls(tls: TLS | None) -> TLS:
    """The given TLS files, else those of ``$RABBITQ_TLS_*``."""
    return tls if tls is not None else Settings.from_env().tls


def ssl_context_for(url: str, tls: TLS) -> ssl.SSLContext | None:
    """The SSL context for ``url``: one for ``amqps://``, none for ``amqp://``.

    TLS files with a plain ``amqp://`` URL are a mistake that would send the password
    in clear: it is an error, not a silent downgrade.
    """
    scheme = urlsplit(url).scheme.lower()
    if scheme == "amqps":
        return tls.context()
    if tls.configured:
        raise ConfigurationError(
            f"TLS files are set but the URL {redact_url(url)} is not amqps://: "
            f"use amqps:// (TLS port, usually 5671) or unset the TLS options"
        )
    return None


def redact_url(url: str) -> str:
    """The URL with its password replaced by ``***``, safe for logs and errors."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    # Host and port as written: IPv6 brackets kept, and a bad port cannot raise here.
    host = parts.netloc.rpartition("@")[2]
    netloc = f"{user}:***@{host}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


# A password this long is masked wherever it appears; a shorter one only where it stands
# as a URL's password, so that "guest" or "rabbit" do not mangle ordinary words.
_MASK_ANYWHERE = 8


def scrub(text: str, password: str | None) -> str:
    """``text`` with ``password`` replaced by ``***`` (see ``_MASK_ANYWHERE``)."""
    if not password:
        return text
    for form in {password, quote(password, safe="")}:
        text = text.replace(f":{form}@", ":***@")
        if len(form) >= _MASK_ANYWHERE:
            text = text.replace(form, "***")
    return text


def url_password(url: str) -> str | None:
    """The password in the URL, so that error text can be scrubbed of it."""
    return urlsplit(url).password
