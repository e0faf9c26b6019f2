"""Handlers' results of an encrypted app, kept encrypted in its chord store: a result
is stored as one JSON string, the token of its JSON text (bound to its message id), and
read back decrypted (``ctx.chord_results()``, ``app.result()``). A result stored before
the app turned encryption on is read as it is."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from ..errors import ConfigurationError
from ..workflow.chords import chord_store
from .codec import Cipher, cipher_of, token_keys


class SealedChords:
    """A chord store whose results are encrypted with ``cipher``; the rest is ``inner``'s."""

    def __init__(self, inner: Any, cipher: Cipher) -> None:
        self.inner = inner
        self.cipher = cipher

    def __getattr__(self, name: str) -> Any:  # mark, claim, release, sent, close
        return getattr(self.inner, name)

    async def put_result(self, message_id: str, result: bytes) -> None:
        sealed = self.cipher.seal_text(result.decode(), message_id)
        await self.inner.put_result(message_id, orjson.dumps(sealed))

    def _open(self, value: Any, message_id: str) -> Any:
        if isinstance(value, str) and value.startswith("enc:") and token_keys(value):
            return orjson.loads(self.cipher.open_text(value, message_id))
        return value

    async def result(self, message_id: str) -> Any:
        return self._open(await self.inner.result(message_id), message_id)

    async def results(self, group_id: str) -> Sequence[tuple[int, str, Any]]:
        found = await self.inner.results(group_id)
        return [(i, mid, self._open(value, mid)) for i, mid, value in found]


def sealed_chords(app: Any) -> Any:
    """The chord store beside ``app``'s status store (None without one), its results
    encrypted if the app is."""
    writer = app.status_writer
    store = chord_store(writer.store) if writer is not None else None
    cipher = cipher_of(app)
    return store if store is None or cipher is None else SealedChords(store, cipher)


async def read_result(app: Any, message_id: str) -> Any:
    """:meth:`rabbitq.App.result`: what ``message_id``'s handler returned (decrypted)."""
    store = sealed_chords(app)
    if store is None:
        raise ConfigurationError(f"{app!r} has no PostgreSQL or Redis status store")
    try:
        return await store.result(message_id)
    finally:
        await store.close()
