"""Connection settings: the one place that reads the environment.

Everything else receives a URL (or a :class:`Settings`) as a plain argument, so that
importing rabbitq has no side effects and tests can run many apps side by side.
"""

from __future__ import annotations

import os
import re
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import quote, urlsplit, urlunsplit

from .errors import ConfigurationError

DEFAULT_URL = "amqp://guest:guest@localhost:5672/"
URL_ENV = "RABBITQ_URL"
TLS_CA_ENV = "RABBITQ_TLS_CA"
TLS_CERT_ENV = "RABBITQ_TLS_CERT"
TLS_KEY_ENV = "RABBITQ_TLS_KEY"
CONSUMER_TIMEOUT_ENV = "RABBITQ_CONSUMER_TIMEOUT"
MANAGEMENT_URL_ENV = "RABBITQ_MANAGEMENT_URL"


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
    (``0``: it has none; ``None``: assume RabbitMQ's default, see
    ``rabbitq._worker.consumer_timeout``)."""

    url: str = DEFAULT_URL
    tls: TLS = field(default_factory=TLS)
    consumer_timeout: float | None = None
    management_url: str | None = None
    """RabbitMQ's management API (None: ``http://<broker host>:15672``; ``off``: not used)."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read ``$RABBITQ_URL`` (default: the local broker as guest), ``$RABBITQ_TLS_CA``,
        ``$RABBITQ_TLS_CERT``, ``$RABBITQ_TLS_KEY``, ``$RABBITQ_CONSUMER_TIMEOUT`` and
        ``$RABBITQ_MANAGEMENT_URL``."""
        env = os.environ if environ is None else environ
        return cls(
            url=env.get(URL_ENV) or DEFAULT_URL,
            tls=TLS(
                ca=env.get(TLS_CA_ENV) or None,
                cert=env.get(TLS_CERT_ENV) or None,
                key=env.get(TLS_KEY_ENV) or None,
            ),
            consumer_timeout=_seconds(CONSUMER_TIMEOUT_ENV, env.get(CONSUMER_TIMEOUT_ENV)),
            management_url=env.get(MANAGEMENT_URL_ENV) or None,
        )


SEMCONV_OPT_IN_ENV = "OTEL_SEMCONV_STABILITY_OPT_IN"


def semconv_opt_in(environ: Mapping[str, str] | None = None) -> str:
    """``$OTEL_SEMCONV_STABILITY_OPT_IN`` as set ("" when unset), read where the tracing is
    built (rabbitq.tracing.semconv says what rabbitq makes of it)."""
    env = os.environ if environ is None else environ
    return env.get(SEMCONV_OPT_IN_ENV, "")


def configured_url(url: str | None) -> str:
    """The given URL, else ``$RABBITQ_URL``, else the local broker; not checked (for
    scrubbing its password out of an error about it)."""
    return url or Settings.from_env().url


def resolve_url(url: str | None) -> str:
    """The given URL, else ``$RABBITQ_URL``, else the local broker, checked by
    :func:`check_url` before anything connects to it."""
    return check_url(configured_url(url))


SCHEMES = ("amqp", "amqps")
_EXAMPLE = "for example amqp://guest:guest@localhost:5672/"


def url_problem(url: str) -> str | None:
    """What is wrong with a broker URL, in a few words, or None if nothing is (pure).

    aio-pika takes ``localhost:5672`` or ``garbage`` as a URL and then retries forever
    ("host and port was not specified"), and speaks plain AMQP to ``http://``; so the
    scheme must be ``amqp`` or ``amqps`` and a host must be present.
    """
    if not url.strip():
        return f"it is empty ({_EXAMPLE})"
    if any(c.isspace() for c in url):
        return "it contains white space"
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # e.g. an unbalanced IPv6 bracket
        return f"it cannot be parsed ({exc})"
    scheme = parts.scheme.lower()
    if "://" not in url or not scheme:
        return f"it has no scheme: write amqp://... or amqps://... ({_EXAMPLE})"
    if scheme not in SCHEMES:
        return (
            f"the scheme {parts.scheme + '://'!r} is not AMQP: use amqp:// or amqps:// "
            f"(TLS) ({_EXAMPLE})"
        )
    if not parts.hostname:
        return f"it names no host ({_EXAMPLE})"
    try:
        parts.port  # noqa: B018 (urlsplit checks the port only when asked)
    except ValueError:
        return "its port is not a number from 0 to 65535"
    return None


def check_url(url: str) -> str:
    """``url`` if it is a broker URL rabbitq can use (one, or several separated by commas:
    see :func:`broker_urls`), else :class:`ConfigurationError` with one line that says
    what is wrong (and no password)."""
    broker_urls(url)
    return url


def _shown(url: str) -> str:
    """A URL that may be malformed, for an error: the password masked all the same."""
    if "://" in url:
        try:
            return redact_url(url)
        except ValueError:
            pass
        head, _, rest = url.partition("://")
        return f"{head}://{_mask_userinfo(rest)}"
    return _mask_userinfo(url)


def _mask_userinfo(text: str) -> str:
    """``user:secret@host`` as ``user:***@host`` (text without a scheme)."""
    userinfo, at, host = text.rpartition("@")
    if not at:
        return text
    user, colon, _ = userinfo.partition(":")
    return f"{user}:***@{host}" if colon else text


# A new address starts where a comma is followed by a scheme, so that a comma inside a
# password or a query string does not split a URL.
_NEXT_URL = re.compile(r"\s*,\s*(?=amqps?://)", re.IGNORECASE)


def broker_urls(url: str) -> tuple[str, ...]:
    """The addresses in ``url``: one, or several separated by commas (the nodes of a
    cluster: ``amqp://u:p@node1/,amqp://u:p@node2/``). Each must be an ``amqp://`` or
    ``amqps://`` URL with a host, all with the same scheme (one TLS setting serves all)."""
    urls = tuple(part for part in _NEXT_URL.split(url.strip()) if part) or (url,)
    schemes = set()
    for one in urls:
        problem = url_problem(one)
        if problem is not None:
            raise ConfigurationError(f"invalid broker URL {_shown(one)!r}: {problem}")
        schemes.add(urlsplit(one).scheme.lower())
    if len(schemes) > 1:
        raise ConfigurationError(
            "the broker URLs mix amqp:// and amqps://: give every node the same scheme"
        )
    return urls


def join_urls(urls: str | Sequence[str]) -> str:
    """One URL string for several addresses (comma-separated), validated."""
    if isinstance(urls, str):
        broker_urls(urls)
        return urls
    for one in urls:
        if len(broker_urls(one)) != 1:
            raise ConfigurationError(f"give one URL per list item, not {redact_url(one)!r}")
    return ",".join(u.strip() for u in urls)


def resolve_tls(tls: TLS | None) -> TLS:
    """The given TLS files, else those of ``$RABBITQ_TLS_*``."""
    return tls if tls is not None else Settings.from_env().tls


def ssl_context_for(url: str, tls: TLS) -> ssl.SSLContext | None:
    """The SSL context for ``url``: one for ``amqps://``, none for ``amqp://``.

    TLS files with a plain ``amqp://`` URL are a mistake that would send the password
    in clear: it is an error, not a silent downgrade.
    """
    scheme = urlsplit(check_url(url)).scheme.lower()
    if scheme == "amqps":
        return tls.context()
    if tls.configured:
        raise ConfigurationError(
            f"TLS files are set but the URL {redact_url(url)} is not amqps://: "
            f"use amqps:// (TLS port, usually 5671) or unset the TLS options"
        )
    return None


def redact_url(url: str) -> str:
    """The URL with its password replaced by ``***``, safe for logs and errors
    (each one's, for several comma-separated URLs)."""
    several = _NEXT_URL.split(url)
    if len(several) > 1:
        return ",".join(redact_url(one) for one in several)
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
    """The password in the URL, so that error text can be scrubbed of it (for several
    URLs, the first one's: a cluster's nodes share their users)."""
    for one in _NEXT_URL.split(url):
        password = urlsplit(one).password
        if password:
            return password
    return None
