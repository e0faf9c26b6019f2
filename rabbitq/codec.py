"""Bytes <-> typed messages, with orjson; the only place a body is parsed.

Encoding goes through pydantic's JSON mode, so ``Decimal`` becomes a string (never a
float), ``datetime`` an ISO 8601 string with its offset, ``UUID`` and enums their
values; decoding validates the same way back, so all of them round-trip exactly.
Any failure is a :class:`~rabbitq.errors.DecodeError` whose ``reason`` is the DLQ
reason: ``invalid`` for a body that is not a valid message of its type.
"""

from __future__ import annotations

from typing import TypeVar

import orjson
from pydantic import ValidationError

from .errors import DecodeError
from .message import Message
from .retry import INVALID

M = TypeVar("M", bound=Message)

CONTENT_TYPE = "application/json"
_MAX_DETAIL = 400


def encode(message: Message) -> bytes:
    """The message as compact JSON bytes."""
    return orjson.dumps(message.model_dump(mode="json"))


def decode(body: bytes, model: type[M]) -> M:
    """Parse and validate ``body`` as ``model``; raise ``DecodeError('invalid', ...)``."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise DecodeError(INVALID, f"body is not JSON: {exc}"[:_MAX_DETAIL]) from exc
    if not isinstance(data, dict):
        raise DecodeError(INVALID, f"body is JSON {type(data).__name__}, expected an object")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise DecodeError(
            INVALID, f"{model.type_name()} failed validation: {describe(exc)}"[:_MAX_DETAIL]
        ) from exc
    except RecursionError as exc:  # pathologically nested input
        raise DecodeError(INVALID, "body is nested too deeply") from exc
    except Exception as exc:  # a validator's own KeyError, TypeError...: still poison input
        raise DecodeError(
            INVALID,
            f"{model.type_name()} failed validation: {type(exc).__name__}: {exc}"[:_MAX_DETAIL],
        ) from exc


def describe(exc: ValidationError) -> str:
    """A validation error as one line: ``field: problem; other.field: problem``."""
    return "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}"
        for err in exc.errors(include_url=False, include_input=False)
    )
