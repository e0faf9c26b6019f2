"""Exceptions raised by rabbitq.

Control flow, raised by your handler::

    PermanentError            dead-letter this message now, do not retry
    RetryLater                try again after ``seconds`` (a provider's 429 / Retry-After);
                              by default this does not use up one of the message's attempts

Faults, raised by rabbitq::

    RabbitqError
    ├── ConfigurationError    the app is set up wrongly (duplicate type, bad policy, ...)
    │   └── WorkflowIdInUse   a workflow id already names a different chain, group or chord
    ├── DelayError            a delay= or at= the delay ladder cannot hold (a ValueError too)
    ├── AppLoadError          MODULE:APP cannot be imported or is not an App
    ├── BrokerUnavailable     the broker cannot be reached or the connection is closed
    ├── TopologyMismatch      a queue exists with other arguments than rabbitq declares
    ├── DecodeError           a delivery cannot become a typed message (poison input)
    ├── HandlerNotStarted     no thread was free for a sync handler (it did not run)
    ├── HandlerTimeout        a handler ran past its ``timeout`` (the attempt failed)
    ├── MiddlewareError       a middleware broke the stage contract (the attempt failed)
    ├── PublishError          a publish was not confirmed
    │   ├── Unroutable        no queue is bound for the routing key (mandatory publish)
    │   ├── PublishNacked     the broker refused the message (nack)
    │   ├── PublishInterrupted the connection or channel closed before the confirm
    │   └── PartialPublish    some messages of a publish_many batch were not confirmed
    └── DlqError              a DLQ operation was given bad input (queue, file, filter)
        └── DlqInterrupted    the connection closed during a DLQ operation (``summary``)
"""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import parsedate_to_datetime


class PermanentError(Exception):
    """Raise from a handler to dead-letter the message at once (reason ``permanent``)."""


class RetryLater(Exception):
    """Raise from a handler to try the message again in ``seconds`` or a little later.

    The message waits in the broker's delay ladder for ``seconds`` (rounded up to
    125 ms; at least 125 ms, at most 48 days: docs/delays.md) and comes back to the
    queue that failed only. It does not use up one of its attempts unless
    ``count_attempt=True``; with ``count_attempt=True`` and no attempt left it is
    dead-lettered as ``exhausted``.
    """

    def __init__(self, seconds: float, *, count_attempt: bool = False) -> None:
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, int | float)
            or not 0 <= seconds < float("inf")
        ):
            raise ValueError(f"RetryLater needs finite seconds >= 0, not {seconds!r}")
        self.seconds = float(seconds)
        self.count_attempt = count_attempt
        super().__init__(f"retry after {self.seconds:g}s")

    @classmethod
    def from_retry_after(
        cls, value: str, *, default: float = 1.0, count_attempt: bool = False
    ) -> RetryLater:
        """From an HTTP ``Retry-After`` value: seconds (``"30"``) or a date; ``default``
        seconds when it cannot be read."""
        text = value.strip()
        if text.isascii() and text.isdigit():
            return cls(int(text), count_attempt=count_attempt)
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError):
            return cls(default, count_attempt=count_attempt)
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - datetime.now(UTC)).total_seconds()
        return cls(max(0.0, seconds), count_attempt=count_attempt)


class RabbitqError(Exception):
    """Root of every fault that rabbitq itself raises."""


class ConfigurationError(RabbitqError):
    """The application is configured in a way that cannot work."""


class WorkflowIdInUse(ConfigurationError):
    """A chain, group or chord was published under an id that already names a different
    one (its members would share message ids with the first's: nothing of it is sent)."""


class DelayError(RabbitqError, ValueError):
    """``publish(delay=..., at=...)`` was given a time the delay ladder cannot hold: both,
    a naive datetime, a negative delay, or one beyond the ladder's maximum (48 days).
    Raised before anything is sent."""


class AppLoadError(RabbitqError):
    """``MODULE:APP`` could not be imported, or does not name an :class:`~rabbitq.App`."""


class BrokerUnavailable(RabbitqError):
    """The broker could not be reached, or the connection closed under us."""


class TopologyMismatch(RabbitqError):
    """A queue or exchange exists with other arguments than the ones rabbitq declares."""

    def __init__(
        self, kind: str, name: str, argument: str, detail: str, *, explanation: str = ""
    ) -> None:
        self.kind = kind
        self.name = name
        self.argument = argument
        self.detail = detail
        remedy = (
            f"drain and delete it (rabbitmqctl delete_queue {name})"
            if kind == "queue"
            else "delete it"
        )
        super().__init__(
            explanation
            or f"{kind} {name!r} already exists with a different {argument!r} ({detail}); "
            f"RabbitMQ cannot change this in place: {remedy}, "
            f"or configure the app to match what exists"
        )


class DecodeError(RabbitqError):
    """A delivery could not be decoded and validated; ``reason`` is the DLQ reason."""

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        super().__init__(message)


class HandlerNotStarted(RabbitqError):
    """A sync handler found no free thread within its ``timeout`` (threads held by hung
    handlers) and did not run; the message is retried without counting an attempt."""


class HandlerTimeout(RabbitqError):
    """A handler ran past its ``timeout``; recorded as the error of the failed attempt,
    which is retried like any other failure."""


class MiddlewareError(RabbitqError):
    """A middleware broke the stage contract: it returned something other than an
    outcome without one from ``call_next``, or called ``call_next`` a second time (raised
    there: the rest of the list runs once per attempt). Recorded as the error of the
    failed attempt, which is retried like any other failure (docs/middleware.md)."""


class PublishError(RabbitqError):
    """A message was not confirmed by the broker; it may or may not have been stored."""


class Unroutable(PublishError):
    """The broker returned a mandatory message: no queue is bound for its routing key."""


class PublishNacked(PublishError):
    """The broker answered the publish with a negative confirm."""


class PublishInterrupted(PublishError):
    """The broker did not confirm the message: the connection or channel closed, or no
    confirm came within the publisher's deadline.

    Unless the error says "nothing was sent", the message may have been stored anyway:
    a broker under a memory or disk alarm sends ``connection.blocked`` only once a
    connection publishes, keeps that publish unread, and stores it when the alarm
    clears. Publish again with the same ``message_id`` (at-least-once) if it matters.
    """


class PartialPublish(PublishError):
    """Some messages of a ``publish_many`` batch were not confirmed.

    ``confirmed`` holds the message ids the broker confirmed, ``failed`` the
    ``(message_id, error)`` pairs that were not, in publish order.
    """

    def __init__(self, confirmed: list[str], failed: list[tuple[str, PublishError]]) -> None:
        self.confirmed = confirmed
        self.failed = failed
        first = failed[0][1]
        super().__init__(
            f"{len(failed)} of {len(confirmed) + len(failed)} messages were not confirmed "
            f"(first: {first})"
        )


class DlqError(RabbitqError):
    """A DLQ operation was given bad input: an unknown queue, a bad file or filter."""


class DlqInterrupted(DlqError):
    """The connection closed during a DLQ operation; ``summary`` says what was done.

    Nothing is lost: every message whose removal was not settled stays in (or returns
    to) its queue. Messages counted in ``summary.possible_duplicates`` may have been
    copied and still be in the DLQ, so running the operation again may copy them twice.
    """

    def __init__(self, message: str, summary: object) -> None:
        self.summary = summary
        super().__init__(message)


# -- optional extras: which one installs a missing module (pure) ----------------------
EXTRAS: dict[str, str] = {
    "psycopg": "postgres",
    "psycopg_pool": "postgres",
    "redis": "redis",
    "opentelemetry": "otel",
    "starlette": "console",
    "uvicorn": "console",
    "jinja2": "console",
    "multipart": "console",
    "python_multipart": "console",
    "uvloop": "uvloop",
    "watchfiles": "reload",
    "cryptography": "encryption",
    "boto3": "s3",
}
"""Top-level module name -> the extra that installs it."""


def extra_for(module: str | None) -> str | None:
    """The extra that installs ``module`` (a dotted name is looked up by its top
    package), or None if no extra does."""
    if not module:
        return None
    return EXTRAS.get(module.split(".", 1)[0])


def install_hint(module: str | None) -> str:
    """`` (pip install 'rabbitq[postgres]')`` for a module an extra installs, else ""."""
    extra = extra_for(module)
    return f" (pip install 'rabbitq[{extra}]')" if extra else ""


def missing(what: str, exc: ImportError) -> str:
    """One line: ``what`` needs an extra that is not installed, and how to install it."""
    extra = extra_for(exc.name)
    if extra is None:
        return f"{what} cannot import {exc.name or 'a module'}: {exc}"
    return f"{what} needs the {extra!r} extra: pip install 'rabbitq[{extra}]' ({exc.name} missing)"
