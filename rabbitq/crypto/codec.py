"""Authenticated encryption of bodies and texts with a :class:`~.keyring.Keyring`:
AES-GCM from ``cryptography`` (the ``encryption`` extra), a fresh 96-bit nonce each time.

- A **body** becomes ``0x01 | nonce (12) | ciphertext+tag``; its key id goes in the
  ``rabbitq-key-id`` header. The associated data binds it to the message id and type,
  so a body cannot be moved onto another message (a retry, a replay keep both).
- A **text** (an error, a traceback, a status detail, a stored result) becomes one
  token ``enc:KEY_ID:BASE64URL``, bound to the message id; the rest of a header stays
  text, so an error keeps its exception type in clear: ``ValueError: enc:k2:...``.

Failure to decrypt (a key the ring lacks, a tag that does not verify) raises
:class:`Undecryptable`; never a partial plaintext.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from pamqp.commands import Basic

from .._amqp import headers as h
from ..errors import ConfigurationError, RabbitqError, missing
from ..workflow.wire import CHAIN, CHORD
from .keyring import Keyring

KEY_ID = h.KEY_ID
"""The header naming the key a message's body is encrypted under (absent: clear text)."""

CONTENT_TYPE = "application/vnd.rabbitq.encrypted"
"""An encrypted body's content type (a clear one is ``application/json``)."""

SEALED_HEADERS = (CHAIN, CHORD)
"""Headers that carry the bodies of other messages, encrypted like a body (as a text)."""

_VERSION = b"\x01"
_NONCE = 12
_TAG = 16
_TOKEN = h.SEALED_TEXT


class Undecryptable(RabbitqError):
    """A body or text that this key ring cannot decrypt: ``key_id`` unknown, or the
    authentication tag failed (the ciphertext, its message id or type was changed)."""

    def __init__(self, message: str, key_id: str | None) -> None:
        super().__init__(message)
        self.key_id = key_id


def _aesgcm() -> Any:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError as exc:  # the optional extra is missing
        raise ConfigurationError(missing("App(encryption=...)", exc)) from None
    return AESGCM


class Cipher:
    """AES-GCM under the keys of ``keyring`` (one cipher object per key, made once)."""

    __slots__ = ("_aes", "_made", "keyring")

    def __init__(self, keyring: Keyring) -> None:
        if not isinstance(keyring, Keyring):
            raise ConfigurationError(f"encryption= takes a rabbitq.crypto.Keyring, not {keyring!r}")
        self.keyring = keyring
        self._aes = _aesgcm()
        self._made: dict[str, Any] = {}

    def _cipher(self, key_id: str) -> Any:
        made = self._made.get(key_id)
        if made is None:
            key = self.keyring.key(key_id)
            if key is None:
                raise Undecryptable(f"key {key_id!r} is not in the key ring", key_id)
            made = self._made[key_id] = self._aes(key)
        return made

    # -- bodies --------------------------------------------------------------------------

    def seal_body(self, body: bytes, message_id: str, type_name: str) -> tuple[str, bytes]:
        """``(key id, envelope)``: ``body`` encrypted under the current key."""
        key_id = self.keyring.current
        nonce = os.urandom(_NONCE)
        sealed = self._cipher(key_id).encrypt(nonce, body, _body_aad(message_id, type_name))
        return key_id, _VERSION + nonce + sealed

    def open_body(self, key_id: str, envelope: bytes, message_id: str, type_name: str) -> bytes:
        """The clear body of ``envelope``; :class:`Undecryptable` if it cannot be."""
        aes = self._cipher(key_id)
        if len(envelope) < 1 + _NONCE + _TAG or envelope[:1] != _VERSION:
            raise Undecryptable(f"not a body encrypted by rabbitq (key {key_id!r})", key_id)
        nonce, sealed = envelope[1 : 1 + _NONCE], envelope[1 + _NONCE :]
        try:
            return bytes(aes.decrypt(nonce, sealed, _body_aad(message_id, type_name)))
        except Exception:  # cryptography's InvalidTag: changed, or not this message's
            raise Undecryptable(
                f"the body did not authenticate under key {key_id!r} (changed, or moved "
                "from another message)",
                key_id,
            ) from None

    def seal_properties(self, body: bytes, props: Basic.Properties, type_name: str) -> bytes:
        """:func:`seal_properties` with this cipher."""
        return seal_properties(self, body, props, type_name)

    def seal_headers(self, headers: dict[str, Any], message_id: str) -> None:
        """Encrypt, in place, the headers that carry other messages' bodies
        (:data:`SEALED_HEADERS`: a chain's later steps, a chord's callback)."""
        for name in SEALED_HEADERS:
            value = headers.get(name)
            if isinstance(value, str) and not value.startswith("enc:"):
                headers[name] = self.seal_text(value, message_id)

    def open_headers(self, headers: Mapping[str, Any], message_id: str) -> dict[str, Any] | None:
        """``headers`` with its encrypted :data:`SEALED_HEADERS` decrypted; None when it
        has none; :class:`Undecryptable` when one cannot be."""
        sealed = {
            n: t for n in SEALED_HEADERS if (t := h.text_header(headers, n)) and t[:4] == "enc:"
        }
        if not sealed:
            return None
        return {**headers, **{n: self.open_text(t, message_id) for n, t in sealed.items()}}

    # -- texts ---------------------------------------------------------------------------

    def seal_text(self, text: str, message_id: str) -> str:
        """``enc:KEY_ID:BASE64URL``: ``text`` encrypted under the current key."""
        key_id = self.keyring.current
        nonce = os.urandom(_NONCE)
        sealed = self._cipher(key_id).encrypt(nonce, text.encode(), _text_aad(message_id))
        return f"enc:{key_id}:{base64.urlsafe_b64encode(nonce + sealed).decode()}"

    def open_token(self, key_id: str, data: str, message_id: str) -> str:
        """The clear text of one token's parts; :class:`Undecryptable` if it cannot be."""
        aes = self._cipher(key_id)
        try:
            raw = base64.urlsafe_b64decode(data)
            return str(aes.decrypt(raw[:_NONCE], raw[_NONCE:], _text_aad(message_id)).decode())
        except (binascii.Error, ValueError, Exception):
            raise Undecryptable(
                f"a text did not authenticate under key {key_id!r}", key_id
            ) from None

    def open_text(self, text: str, message_id: str) -> str:
        """``text`` with every token decrypted; :class:`Undecryptable` if one cannot be."""
        return _TOKEN.sub(lambda m: self.open_token(m[1], m[2], message_id), text)


def _body_aad(message_id: str, type_name: str) -> bytes:
    return b"rabbitq-body/1\x00" + message_id.encode() + b"\x00" + type_name.encode()


def _text_aad(message_id: str) -> bytes:
    return b"rabbitq-text/1\x00" + message_id.encode()


def described(key_id: str) -> str:
    """What a reader without the key sees: ``encrypted (key k2)``."""
    return f"encrypted (key {key_id})"


def token_keys(text: str) -> list[str]:
    """The key ids of the tokens in ``text`` (pure)."""
    return [m[1] for m in _TOKEN.finditer(text)]


def shown_text(text: str, message_id: str, cipher: Cipher | None) -> str:
    """``text`` for a person: each token decrypted with ``cipher``, or
    ``encrypted (key K)`` where there is no cipher or it cannot decrypt it."""

    def one(m: re.Match[str]) -> str:
        if cipher is not None:
            try:
                return cipher.open_token(m[1], m[2], message_id)
            except Undecryptable:
                pass
        return described(m[1])

    return _TOKEN.sub(one, text)


def resealer(cipher: Cipher, message_id: str) -> Callable[[str], str]:
    """A function that re-encrypts every token of a text under the current key (tokens
    it cannot open are kept as they are)."""

    def one(m: re.Match[str]) -> str:
        if m[1] == cipher.keyring.current:
            return m[0]
        try:
            return cipher.seal_text(cipher.open_token(m[1], m[2], message_id), message_id)
        except Undecryptable:
            return m[0]

    return lambda text: _TOKEN.sub(one, text)


def seal_properties(cipher: Cipher, body: bytes, props: Basic.Properties, type_name: str) -> bytes:
    """Encrypt ``body`` of a message with ``props`` (its id set) under the current key:
    the key id into its headers, its content type :data:`CONTENT_TYPE`; the new body."""
    assert props.message_id is not None
    key_id, sealed = cipher.seal_body(body, props.message_id, type_name)
    if props.headers is None:
        props.headers = {}
    props.headers[KEY_ID] = key_id
    cipher.seal_headers(props.headers, props.message_id)
    props.content_type = CONTENT_TYPE
    return sealed


def cipher_of(app: Any) -> Cipher | None:
    """The cipher of an encrypted app (its ``decrypt`` stage's), else None."""
    for stage in getattr(app, "delivery_stages", ()):
        if getattr(stage, "name", None) == "decrypt" and isinstance(stage.cipher, Cipher):
            return stage.cipher
    return None
