"""What a reader sees of an encrypted message (pure but for the decryption): with the
app's key ring, the clear body and failure texts; without it, or under a key the ring
lacks, ``encrypted (key K)`` in their place. For showing only: what the DLQ tools move
or export is always the message as it is, ciphertext and all."""

from __future__ import annotations

import dataclasses
from typing import Any

from .._amqp import headers as h
from ..dlq.message import DeadMessage
from .codec import Cipher, Undecryptable, described, shown_text

_TEXTS = (h.ERROR, h.TRACEBACK)


def reveal(m: DeadMessage, cipher: Cipher | None) -> DeadMessage:
    """``m`` as a person may read it: its body decrypted when ``cipher`` can (the key id
    header then removed), its error and traceback decrypted or described."""
    mid, headers, body = m.message_id or "", dict(m.headers), m.body
    for name in _TEXTS:
        text = h.text_header(headers, name)
        if text is not None:
            headers[name] = shown_text(text, mid, cipher)
    key_id = h.text_header(headers, h.KEY_ID)
    if key_id is not None and cipher is not None:
        try:
            body = cipher.open_body(key_id, body, mid, m.type or "")
            del headers[h.KEY_ID]
        except Undecryptable:
            pass
    return dataclasses.replace(m, headers=headers, body=body)


def shown_body(m: DeadMessage) -> tuple[str, str] | None:
    """``("encrypted", "encrypted (key K)")`` for a body still encrypted, else None."""
    key_id = h.text_header(m.headers, h.KEY_ID)
    return None if key_id is None else ("encrypted", described(key_id))


def reveal_tree(value: Any, message_id: str, cipher: Cipher | None) -> Any:
    """``value`` (JSON-like data: a status record) with every text's tokens decrypted
    or described."""
    if isinstance(value, str):
        return shown_text(value, message_id, cipher)
    if isinstance(value, dict):
        return {k: reveal_tree(v, message_id, cipher) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [reveal_tree(v, message_id, cipher) for v in value]
    return value
