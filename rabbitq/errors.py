"""Exceptions raised by rabbitq.

Control flow, raised by your handler::

    PermanentError            dead-letter this message now, do not retry

Faults, raised by rabbitq::

    RabbitqError
    ├── ConfigurationError    the app is set up wrongly (duplicate type, bad policy, ...)
    ├── AppLoadError          MODULE:APP cannot be imported or is not an App
    ├── BrokerUnavailable     the broker cannot be reached or the connection is closed
    ├── TopologyMismatch      a queue exists with other arguments than rabbitq declares
    ├── DecodeError           a delivery cannot become a typed message (poison input)
    └── PublishError          a publish was not confirmed
        ├── Unroutable        no queue is bound for the routing key (mandatory publish)
        ├── PublishNacked     the broker refused the message (nack)
        ├── PublishInterrupted the connection or channel closed before the confirm
        └── PartialPublish    some messages of a publish_many batch were not confirmed
    └── DlqError              a DLQ operation was given bad input (queue, file, filter)
        └── DlqInterrupted    the connection closed during a DLQ operation (``summary``)
"""

from __future__ import annotations


class PermanentError(Exception):
    """Raise from a handler to dead-letter the message at once (reason ``permanent``)."""


class RabbitqError(Exception):
    """Root of every fault that rabbitq itself raises."""


class ConfigurationError(RabbitqError):
    """The application is configured in a way that cannot work."""


class AppLoadError(RabbitqError):
    """``MODULE:APP`` could not be imported, or does not name an :class:`~rabbitq.App`."""


class BrokerUnavailable(RabbitqError):
    """The broker could not be reached, or the connection closed under us."""


class TopologyMismatch(RabbitqError):
    """A queue or exchange exists with other arguments than the ones rabbitq declares."""

    def __init__(self, kind: str, name: str, argument: str, detail: str) -> None:
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
            f"{kind} {name!r} already exists with a different {argument!r} ({detail}); "
            f"RabbitMQ cannot change this in place: {remedy}, "
            f"or configure the app to match what exists"
        )


class DecodeError(RabbitqError):
    """A delivery could not be decoded and validated; ``reason`` is the DLQ reason."""

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        super().__init__(message)


class PublishError(RabbitqError):
    """A message was not confirmed by the broker; it may or may not have been stored."""


class Unroutable(PublishError):
    """The broker returned a mandatory message: no queue is bound for its routing key."""


class PublishNacked(PublishError):
    """The broker answered the publish with a negative confirm."""


class PublishInterrupted(PublishError):
    """The connection or channel closed before the broker confirmed the message."""


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
