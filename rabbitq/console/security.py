"""Who may change things: the operator token, sessions and CSRF tokens.

A person signs in once with the token (``--token`` / ``$RABBITQ_CONSOLE_TOKEN``, or one
generated at start). The server then sets an ``HttpOnly``, ``SameSite=Strict`` session
cookie holding a random session id, never the token. Every state-changing form carries a
CSRF token derived from that session id with a server secret (HMAC), and the server also
refuses a POST whose ``Origin`` is another site. Logs name a *token id* (a short digest
of the token), never the token.

Every request, reading ones included, must name a host the console serves in its
``Host`` header (:func:`host_allowed`): loopback's names, the ``--bind`` address and
each ``--allowed-host``. A page of another site whose name the attacker re-points at
the console's address (DNS rebinding) is then refused, since the browser sends that
site's name.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

COOKIE = "rabbitq_console"
CSRF_FIELD = "csrf"
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")


def new_token() -> str:
    """A token for an operator to type or paste (32 url-safe characters)."""
    return secrets.token_urlsafe(24)


def token_id(token: str) -> str:
    """A short, non-secret name for ``token`` in logs (``tok-1a2b3c4d``)."""
    return "tok-" + hashlib.sha256(token.encode()).hexdigest()[:8]


def same_origin(origin: str | None, host: str | None) -> bool:
    """Whether a request's ``Origin`` header (absent is fine: not a browser's cross-site
    form post) names the host the request was sent to."""
    if origin is None:
        return True
    if origin == "null" or host is None:
        return False
    return urlsplit(origin).netloc == host


def host_name(header: str) -> str:
    """The name in a ``Host`` header, lower case, without its port or IPv6 brackets."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].partition("]")[0]
    return header.rpartition(":")[0] if header.count(":") == 1 else header


def host_allowed(header: str | None, allowed: Iterable[str]) -> bool:
    """Whether a request's ``Host`` header names loopback or one of ``allowed``
    (names or addresses, without ports). A request without one is refused."""
    if not header:
        return False
    name = host_name(header).rstrip(".")
    return name in LOOPBACK_HOSTS or name in {host_name(a).rstrip(".") for a in allowed}


def served_hosts(bind: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
    """The names the console answers to besides loopback's: the ``--bind`` address (not a
    wildcard one, which names no host) and each ``--allowed-host``."""
    wildcard = bind in ("", "0.0.0.0", "::")
    return (*(() if wildcard else (bind,)), *allowed)


@dataclass
class Guard:
    """The token check, the sessions it opened, and their CSRF tokens (in memory: a
    restart signs everybody out)."""

    token: str
    read_only: bool = False
    secret: bytes = field(default_factory=lambda: secrets.token_bytes(32))
    sessions: dict[str, str] = field(default_factory=dict)  # session id -> token id

    @property
    def token_id(self) -> str:
        """See :func:`token_id`."""
        return token_id(self.token)

    def sign_in(self, offered: str) -> str | None:
        """A new session id if ``offered`` is the token (compared in constant time)."""
        if not hmac.compare_digest(offered.encode(), self.token.encode()):
            return None
        session = secrets.token_urlsafe(24)
        self.sessions[session] = self.token_id
        return session

    def sign_out(self, session: str | None) -> None:
        """Forget a session."""
        if session is not None:
            self.sessions.pop(session, None)

    def who(self, session: str | None) -> str | None:
        """The token id a session was opened with, or None if it is not signed in."""
        return None if session is None else self.sessions.get(session)

    def csrf(self, session: str) -> str:
        """The CSRF token for ``session``'s forms."""
        return hmac.new(self.secret, session.encode(), hashlib.sha256).hexdigest()

    def check_csrf(self, session: str | None, offered: str | None) -> bool:
        """Whether ``offered`` is ``session``'s CSRF token."""
        if session is None or offered is None or session not in self.sessions:
            return False
        return hmac.compare_digest(self.csrf(session), offered)
