"""What the broker says when it refuses a connection's virtual host, in words; and
what a failed TLS handshake on the plain AMQP port means.

RabbitMQ answers a ``Connection.Open`` for a vhost that does not exist, or that the
user may not use, with ``Connection.Close`` (530 NOT_ALLOWED). aiormq reports that as
"Expected one of ['Connection.OpenOk'], got <Connection.Close object at 0x...>", which
read as "broker down". :func:`install` makes that frame show its reply code and text,
and :func:`vhost_refusal` turns the error into one line naming the vhost.
:func:`plain_port_hint` adds to a TLS failure that ``amqps://host:5672`` names the plain
port (amqps usually listens on 5671).
"""

from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit

from pamqp import commands

from ..settings import redact_url

# "... got <Connection.Close reply_code=530 reply_text='NOT_ALLOWED - vhost x not found'>"
_CLOSE = re.compile(
    r"<Connection\.Close reply_code=(?P<code>\d+) reply_text=(?P<q>['\"])(?P<text>.*?)(?P=q)>"
)


def _close_repr(self: commands.Connection.Close) -> str:
    return f"<Connection.Close reply_code={self.reply_code} reply_text={self.reply_text!r}>"


def install() -> None:
    """Let ``Connection.Close`` frames show what the broker said (idempotent)."""
    commands.Connection.Close.__repr__ = _close_repr  # type: ignore[method-assign,assignment]


def vhost_of(url: str) -> str:
    """The virtual host a URL names (its path; ``/`` when it has none)."""
    path = urlsplit(url).path
    return unquote(path[1:]) if len(path) > 1 else "/"


def vhost_refusal(url: str, error: str) -> str | None:
    """One line about a refused vhost, if ``error`` is the broker closing the connection
    while it was being opened; else None (pure)."""
    match = _CLOSE.search(error)
    if match is None or "Connection.OpenOk" not in error:
        return None
    vhost = vhost_of(url)
    user = unquote(urlsplit(url).username or "guest")
    return (
        f"RabbitMQ at {redact_url(url)} refused vhost {vhost!r}: it does not "
        f"exist or user {user!r} may not use it (the broker said: {match['code']} "
        f"{match['text']}); fix the URL's path, or create it and grant access "
        f"(rabbitmqctl add_vhost {vhost}; rabbitmqctl set_permissions -p {vhost} {user} "
        f"'.*' '.*' '.*')"
    )


PLAIN_PORT = 5672
TLS_PORT = 5671


def plain_port_hint(url: str) -> str:
    """For a TLS handshake that failed: what to do when an ``amqps://`` URL names the
    plain AMQP port 5672, which does not speak TLS; else "" (pure)."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        return ""
    if parts.scheme.lower() != "amqps" or port != PLAIN_PORT:
        return ""
    tls_url = parts._replace(netloc=parts.netloc.rpartition(":")[0] + f":{TLS_PORT}").geturl()
    return (
        f"port {PLAIN_PORT} is the plain amqp:// port; amqps usually listens on {TLS_PORT}: "
        f"use {redact_url(tls_url)}, or amqp:// to connect without TLS"
    )
