"""Connection settings: the one place that reads the environment.

Everything else receives a URL (or a :class:`Settings`) as a plain argument, so that
importing rabbitq has no side effects and tests can run many apps side by side.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote, urlsplit, urlunsplit

DEFAULT_URL = "amqp://guest:guest@localhost:5672/"
URL_ENV = "RABBITQ_URL"


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Where the broker is. Build it with :meth:`from_env` or pass ``url`` yourself."""

    url: str = DEFAULT_URL

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read ``$RABBITQ_URL`` (default: the local broker as guest)."""
        env = os.environ if environ is None else environ
        return cls(url=env.get(URL_ENV) or DEFAULT_URL)


def resolve_url(url: str | None) -> str:
    """The given URL, else ``$RABBITQ_URL``, else the local broker."""
    return url or Settings.from_env().url


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
