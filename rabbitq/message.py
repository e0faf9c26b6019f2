"""Typed messages: the :class:`Message` base class and the type-name registry.

A message type is a pydantic v2 model with a wire name::

    class SendEmail(Message, type="email.send"):
        to: str

The name is the AMQP ``type`` property and the routing key on the topic exchange.
Two different models may not share a name; that is caught when the second class is
defined (at import time), not when the first message arrives.

Bodies are JSON (orjson), and :func:`decode` is the only place a body is parsed.
Encoding goes through pydantic's JSON mode, so ``Decimal`` becomes a string (never a
float), ``datetime`` an ISO 8601 string with its offset, ``UUID`` and enums their
values; decoding validates the same way back, so all of them round-trip exactly.
Any failure is a :class:`~rabbitq.errors.DecodeError` whose ``reason`` is the DLQ
reason: ``invalid`` for a body that is not a valid message of its type.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar, Protocol, TypeVar

import orjson
from pydantic import BaseModel, ConfigDict, ValidationError

from .errors import ConfigurationError, DecodeError
from .retry import INVALID

# A topic routing key is dot-separated words; "*" and "#" would act as wildcards
# if the name were ever used in a binding, so they are not allowed.
_TYPE_NAME = re.compile(r"^[A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-]+)*$")
_MAX_TYPE_LEN = 255  # AMQP short string

_registry: dict[str, type[Message]] = {}


def validate_type_name(name: str) -> str:
    """Return ``name`` if it can be a type name / routing key, else raise."""
    if not isinstance(name, str) or not _TYPE_NAME.fullmatch(name) or len(name) > _MAX_TYPE_LEN:
        raise ConfigurationError(
            f"invalid message type name {name!r}: use dot-separated words of letters, "
            f"digits, '-' and '_' (for example 'email.send')"
        )
    return name


class Message(BaseModel):
    """Base class of every typed message. Subclass with ``type="name"``."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    __rabbitq_type__: ClassVar[str]

    def __init_subclass__(cls, type: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if type is None:
            # An abstract intermediate base, or a subclass of a typed message that
            # inherits its parent's name without registering a second model for it.
            return
        register(validate_type_name(type), cls)

    @classmethod
    def type_name(cls) -> str:
        """The wire name given with ``type=`` in the class statement."""
        try:
            return cls.__rabbitq_type__
        except AttributeError:
            raise ConfigurationError(
                f"{cls.__qualname__} has no message type: declare it as "
                f"class {cls.__name__}(Message, type='...')"
            ) from None


class Publishable(Protocol):
    """What ``Publisher.publish`` takes besides a message: a workflow
    (:func:`rabbitq.chain`, :func:`rabbitq.group`, :func:`rabbitq.chord`)."""

    async def publish_on(self, pub: Any, app: Any = None) -> str:
        """Publish through ``pub`` (the publisher of ``app``); return the workflow id."""


def _origin(model: type[Message]) -> str:
    return f"{model.__module__}.{model.__qualname__}"


def register(name: str, model: type[Message]) -> None:
    """Register ``model`` under ``name``; a second, different model is an error."""
    existing = _registry.get(name)
    # The same class defined again by a module re-import (e.g. importlib.reload)
    # replaces itself; a different class claiming the name is a mistake.
    if existing is not None and _origin(existing) != _origin(model):
        raise ConfigurationError(
            f"message type {name!r} is already defined by {_origin(existing)}; "
            f"{_origin(model)} cannot use it too"
        )
    model.__rabbitq_type__ = name
    _registry[name] = model


def lookup(name: str) -> type[Message] | None:
    """The model registered under ``name``, if any."""
    return _registry.get(name)


# -- the body on the wire ------------------------------------------------------------

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
