"""An encrypted app's publish step (``encrypt``) and delivery stage (``decrypt``), and the
sealing of what rabbitq itself writes about a message (failure texts, follow-ups).

The delivery stage decrypts the body before it is decoded; a body it cannot decrypt
(a key the ring lacks, a tag that fails) goes to the DLQ as it arrived, reason
``undecryptable``, never retried: replay it once the key is in the ring. On the way
back it seals the outcome's error and traceback, which the retry and DLQ copies'
headers, the status records and the log lines carry: the exception's type stays
clear, its text is encrypted; the log line at INFO shows the type only (the exception
itself, with its traceback, only when the worker logs at DEBUG). A message without a
``rabbitq-key-id`` (published before the app turned encryption on) is handled as it is.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Mapping
from typing import Any

from .._amqp import headers as h
from .._amqp.outgoing import Outgoing, SendNext, add_step
from ..errors import RabbitqError
from ..job import add_stage
from ..outcome import Outcome
from ..retry import UNDECRYPTABLE
from .codec import KEY_ID, Cipher, Undecryptable, seal_properties

log = logging.getLogger("rabbitq.worker")

MAX_SEALED_ERROR = 300
"""UTF-8 bytes of an error text kept before it is encrypted (a status record keeps 500
characters: the token of 300 bytes fits)."""

_TYPE = re.compile(r"^[A-Za-z_][\w.]{0,79}$")


class EncryptedFailure(RabbitqError):
    """What the worker's log shows of a failure of an encrypted app below DEBUG: the
    exception's type, never its text or traceback."""


def seal_error(cipher: Cipher, error: str, message_id: str) -> str:
    """``ValueError: enc:k2:...``: the exception type clear, its text encrypted (all of
    it when it does not start with a type) (pure but for the nonce)."""
    kind, sep, text = error.partition(": ")
    if not sep or not _TYPE.match(kind):
        kind, text = "", error
    sealed = cipher.seal_text(h.truncate_utf8(text, MAX_SEALED_ERROR), message_id)
    return f"{kind}: {sealed}" if kind else sealed


def seal_outcome(cipher: Cipher, outcome: Outcome, message_id: str) -> Outcome:
    """``outcome`` with its error and traceback encrypted, and its exception replaced by
    :class:`EncryptedFailure` unless the worker logs at DEBUG."""
    if outcome.error is None and outcome.traceback is None and outcome.failure is None:
        return outcome
    failure = outcome.failure
    if failure is not None and not log.isEnabledFor(logging.DEBUG):
        shown = EncryptedFailure(f"{type(failure).__name__} (text encrypted)")
        failure = failure if isinstance(failure, EncryptedFailure) else shown
    return dataclasses.replace(
        outcome,
        error=None if outcome.error is None else seal_error(cipher, outcome.error, message_id),
        traceback=None
        if outcome.traceback is None
        else cipher.seal_text(outcome.traceback, message_id),
        failure=failure,
    )


class Opened:
    """A delivery as the stages after ``decrypt`` see it: its workflow headers in clear
    (the worker's retry and DLQ copies are made from the delivery as it arrived)."""

    __slots__ = ("delivery", "headers")

    def __init__(self, delivery: Any, headers: Mapping[str, Any]) -> None:
        self.delivery, self.headers = delivery, headers

    def __getattr__(self, name: str) -> Any:
        return getattr(self.delivery, name)


class Encrypt:
    """The publish step ``encrypt``: the body encrypted under the current key."""

    name = "encrypt"

    def __init__(self, cipher: Cipher) -> None:
        self.cipher = cipher

    async def __call__(self, out: Outgoing, call_next: SendNext) -> str:
        out.body = seal_properties(self.cipher, out.body, out.props, out.type_name)
        return await call_next(out)


class Decrypt:
    """The delivery stage ``decrypt``: the body decrypted before it is decoded, the
    outcome's texts encrypted on the way back."""

    name = "decrypt"

    def __init__(self, cipher: Cipher) -> None:
        self.cipher = cipher

    async def __call__(self, job: Any, call_next: Any) -> Outcome:
        # job: a rabbitq.job.Job (not imported: the job's package imports this one's users)
        key_id = h.text_header(job.headers, KEY_ID)
        message_id = job.message_id
        try:
            if key_id is not None:
                job.body = self.cipher.open_body(key_id, job.body, message_id, job.type_name)
            headers = self.cipher.open_headers(job.headers, message_id)
        except Undecryptable as exc:  # as it arrived, never retried: docs/privacy.md
            dead: Outcome = job.dead_letter(UNDECRYPTABLE, str(exc))
            return dead
        if headers is not None:  # the workflow stage reads a chain's steps in clear; the
            job.delivery = Opened(job.delivery, headers)  # worker copies the original
        return seal_outcome(self.cipher, await call_next(job), message_id)


def encrypted(app: Any, keyring: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """``app``'s publish steps and delivery stages with ``encrypt`` and ``decrypt`` of
    ``keyring`` in their places (App(encryption=...)); ConfigurationError without
    ``cryptography``."""
    cipher = Cipher(keyring)
    steps = add_step(app.publish_steps, Encrypt(cipher))
    return steps, add_stage(app.delivery_stages, Decrypt(cipher))
