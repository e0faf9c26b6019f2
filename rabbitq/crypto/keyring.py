"""The key ring of an encrypted app (pure: no cipher here, see :mod:`.codec`).

A :class:`Keyring` holds every key the app may meet, by a short id, and names the
``current`` one: new messages are encrypted under it, and any key of the ring decrypts.
Rotation is adding a new key as current and keeping the old ones until nothing is left
under them (``rabbitq keys list``, ``rabbitq keys rewrap``: docs/privacy.md).
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import secrets
from collections.abc import Mapping

from ..errors import ConfigurationError

__all__ = ["DEFAULT_ENV", "Keyring"]

DEFAULT_ENV = "RABBITQ_KEYS"
"""The environment variable :meth:`Keyring.from_env` reads by default."""

_KEY_ID = re.compile(r"^[A-Za-z0-9_.-]{1,32}$")
_KEY_SIZES = (16, 24, 32)  # AES-128, -192, -256


def _key_bytes(key_id: str, key: bytes | str) -> bytes:
    """``key`` as raw bytes: bytes as given, text as base64 (standard or URL-safe)."""
    if isinstance(key, str):
        text = key.strip()
        try:
            raw = base64.urlsafe_b64decode(text.replace("+", "-").replace("/", "_") + "==")
        except (binascii.Error, ValueError):
            raise ConfigurationError(f"key {key_id!r} is not base64 text") from None
    else:
        raw = bytes(key)
    if len(raw) not in _KEY_SIZES:
        raise ConfigurationError(
            f"key {key_id!r} has {len(raw)} bytes; AES-GCM takes 16, 24 or 32 "
            "(make one with 'rabbitq keys generate')"
        )
    return raw


class Keyring:
    """Named AES-GCM keys and the id of the ``current`` one (encrypts new messages).

    ``keys`` maps a key id (letters, digits, ``_.-``, at most 32) to a key: 16, 24 or 32
    bytes, or that as base64 text (:meth:`generate_key` makes one). ``current``
    defaults to the only key; with several it must be named. The ids travel in clear
    on every message (``rabbitq-key-id``), the keys never.
    """

    __slots__ = ("_keys", "current")

    def __init__(self, keys: Mapping[str, bytes | str], current: str | None = None) -> None:
        if not keys:
            raise ConfigurationError("a Keyring needs at least one key")
        for key_id in keys:
            if not isinstance(key_id, str) or not _KEY_ID.match(key_id):
                raise ConfigurationError(
                    f"key id {key_id!r} must be 1 to 32 letters, digits, '_', '.' or '-'"
                )
        if current is None:
            if len(keys) > 1:
                raise ConfigurationError(
                    f"name the current key: Keyring({{...}}, current=...) of {sorted(keys)}"
                )
            current = next(iter(keys))
        if current not in keys:
            raise ConfigurationError(f"current key {current!r} is not in the ring {sorted(keys)}")
        self._keys = {k: _key_bytes(k, v) for k, v in keys.items()}
        self.current = current

    def __repr__(self) -> str:  # never the keys themselves
        return f"Keyring({sorted(self._keys)}, current={self.current!r})"

    @property
    def ids(self) -> tuple[str, ...]:
        """The key ids of the ring, the current one first."""
        return (self.current, *sorted(k for k in self._keys if k != self.current))

    def key(self, key_id: str) -> bytes | None:
        """The key with this id, or None if the ring does not hold it."""
        return self._keys.get(key_id)

    @staticmethod
    def generate_key() -> str:
        """A new random 256-bit key, as URL-safe base64 text (``rabbitq keys generate``)."""
        return base64.urlsafe_b64encode(secrets.token_bytes(32)).decode()

    @classmethod
    def parse(cls, text: str, current: str | None = None) -> Keyring:
        """A ring from ``"k2=BASE64,k1=BASE64"``: the first key is current unless
        ``current`` names another (pure; :meth:`from_env` reads it from the environment)."""
        keys: dict[str, str] = {}
        parts = text.strip().replace("\n", ",").split(",") if text.strip() else []
        for n, part in enumerate(parts, 1):
            if not part.strip():  # a template's missing key: the ring would lack it
                raise ConfigurationError(
                    f"entry {n} of the keys is empty: write 'ID=BASE64,ID=BASE64', "
                    "without an empty entry (a key left out would not decrypt its messages)"
                )
            key_id, sep, key = part.strip().partition("=")
            if not sep or not key_id.strip():
                raise ConfigurationError(
                    "keys must be written 'ID=BASE64,ID=BASE64' (the first is current)"
                )
            if key_id.strip() in keys:
                raise ConfigurationError(f"key id {key_id.strip()!r} is given twice")
            keys[key_id.strip()] = key
        if not keys:
            raise ConfigurationError("no keys given: write 'ID=BASE64,ID=BASE64'")
        return cls(keys, current or next(iter(keys)))

    @classmethod
    def from_env(cls, name: str = DEFAULT_ENV, *, default: str | None = None) -> Keyring:
        """The ring in the environment variable ``name`` (:meth:`parse`'s format), else
        ``default`` (for development only); ConfigurationError if neither is set."""
        text = os.environ.get(name) or default
        if not text:
            raise ConfigurationError(
                f"${name} is not set: give 'ID=BASE64' keys (make one with 'rabbitq keys generate')"
            )
        return cls.parse(text)
