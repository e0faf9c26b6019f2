"""Moving an encrypted app's DLQ under its current key (``rabbitq keys rewrap``), and
counting the keys its messages are under (``rabbitq keys list``), so that an old key
can be retired once nothing is left under it.

A rewrap moves as the DLQ tools do (:mod:`rabbitq.dlq.mover`): each message under an
older key is decrypted and encrypted again under the current one (body and failure
texts), published back to the same DLQ with a confirm, and only then acked; the
reader stops at the number of messages the DLQ held when it started, so the new copies
are not read again. Messages already under the current key, or in clear, stay where
they are; a message under a key the ring lacks stays too, counted as failed.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections import Counter

from aio_pika.abc import AbstractConnection

from .._amqp import headers as h
from .._amqp.copy import Copy, stored
from ..dlq.message import DeadMessage
from ..dlq.mover import Mover
from ..dlq.reader import LostConnection, interrupted, session, user_of
from ..dlq.tally import Progress, Tally
from .codec import Cipher, Undecryptable, resealer, token_keys

CLEAR = "(clear)"
"""The count's name for messages whose body is not encrypted."""


def keys_of(m: DeadMessage) -> set[str]:
    """The key ids ``m`` uses: its body's and its failure texts' (pure)."""
    found = {k for k in [h.text_header(m.headers, h.KEY_ID)] if k is not None}
    for name in (h.ERROR, h.TRACEBACK):
        found.update(token_keys(h.text_header(m.headers, name) or ""))
    return found


def count_keys(messages: list[DeadMessage]) -> Counter[str]:
    """Messages per key id (a message under two keys counts for both; :data:`CLEAR` for
    one whose body is not encrypted) (pure)."""
    counts: Counter[str] = Counter()
    for m in messages:
        counts.update({h.text_header(m.headers, h.KEY_ID) or CLEAR} | keys_of(m))
    return counts


def rewrapped(m: DeadMessage, cipher: Cipher, user: str | None = None) -> Copy | None:
    """The copy of ``m`` under the current key; None if it is under no other key.
    Raises :class:`~.codec.Undecryptable` for a key the ring lacks or a failed tag."""
    current = cipher.keyring.current
    if not keys_of(m) - {current}:
        return None
    mid, headers, body = m.message_id or "", dict(m.headers), m.body
    key_id = h.text_header(headers, h.KEY_ID)
    if key_id is not None and key_id != current:
        clear = cipher.open_body(key_id, body, mid, m.type or "")
        headers[h.KEY_ID], body = cipher.seal_body(clear, mid, m.type or "")
    reseal = resealer(cipher, mid)
    for name in (h.ERROR, h.TRACEBACK):
        text = h.text_header(headers, name)
        if text is not None:
            cipher.open_text(text, mid)  # every token must open: else Undecryptable
            headers[name] = reseal(text)
    moved = dataclasses.replace(m, body=body, headers=h.copy_headers(headers))
    return stored(moved, user=user)


async def rewrap(
    queue: str,
    cipher: Cipher,
    *,
    url: str | None = None,
    window: int = 256,
    on_progress: Progress | None = None,
    connection: AbstractConnection | None = None,
) -> Tally:
    """Move every message of ``queue``'s DLQ that is under an older key under the
    current one (copy, confirm, ack); ``done`` counts those moved, ``skipped`` those
    already current or clear, ``failed`` those under a key the ring lacks."""
    async with session("rewrap", queue, url=url, filters=None, connection=connection) as s:
        tally, reader, user = s.tally, s.reader, user_of(s.url)
        channel = await s.connection.channel(publisher_confirms=True, on_return_raises=True)
        try:
            mover = Mover(reader, channel, tally, window=window, on_progress=on_progress)
            try:
                async for delivery in reader.deliveries():
                    if mover.lost is not None:
                        break
                    m = DeadMessage.from_delivery(delivery, s.dlq)
                    tally.scanned += 1
                    try:
                        copy = rewrapped(m, cipher, user)
                    except Undecryptable as exc:
                        tally.fail(str(exc))
                        continue
                    if copy is None:
                        tally.skipped += 1
                        continue
                    await mover.submit(delivery, copy, s.dlq)
            except LostConnection as exc:
                mover.lost = mover.lost or exc.exc or exc
            await mover.finish()
            if mover.lost is not None:
                tally.possible_duplicates = mover.unsettled
                raise interrupted(tally, mover.lost, s.url)
        finally:
            if not channel.is_closed:
                with contextlib.suppress(Exception):
                    await channel.close()
    return tally
