"""What a batch handler is given and may return: :class:`BatchContext` and
:class:`BatchResult` (docs/batches.md).

A batch handler (``@app.batch_handler(M, max_size=100, max_wait=0.2)``) receives
``list[M]`` and a :class:`BatchContext`. It returns None (every message succeeded), raises
(every message failed: each is retried on its own attempt count, or dead-lettered, as a
single handler's would be), or returns a :class:`BatchResult` naming the messages that
failed; the others are acked::

    @app.batch_handler(SendEmail, max_size=100, max_wait=0.2)
    async def send(msgs: list[SendEmail], ctx: BatchContext) -> BatchResult:
        result = BatchResult()
        for i, answer in enumerate(await provider.send_many(msgs)):
            if answer.bounced:
                result.dead_letter(i, "hard bounce")    # to the DLQ, reason "permanent"
            elif answer.throttled:
                result.retry(i, "throttled")            # its next retry tier
        return result
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from .context import Context
from .errors import ConfigurationError, PermanentError
from .message import Message

DEFAULT_MAX_SIZE = 100
DEFAULT_MAX_WAIT = 0.2


@dataclass(frozen=True, slots=True)
class BatchLimits:
    """When a batch is handed to its handler: at ``max_size`` messages, or ``max_wait``
    seconds after its first message arrived, whichever comes first."""

    max_size: int = DEFAULT_MAX_SIZE
    max_wait: float = DEFAULT_MAX_WAIT

    def __post_init__(self) -> None:
        size, wait = self.max_size, self.max_wait
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ConfigurationError(f"max_size must be a positive integer, not {size!r}")
        if isinstance(wait, bool) or not isinstance(wait, int | float) or not wait > 0:
            raise ConfigurationError(f"max_wait must be positive seconds, not {wait!r}")

    def check_prefetch(self, type_name: str, prefetch: int) -> None:
        """A batch of ``max_size`` needs as many deliveries unacked at once: a prefetch
        below it would flush every batch at ``max_wait``, never full."""
        if self.max_size > prefetch:
            raise ConfigurationError(
                f"the batch handler of {type_name!r} has max_size={self.max_size}, above "
                f"the prefetch ({prefetch}): the broker would never hand it a full batch; "
                f"raise the prefetch (App(prefetch=...), rabbitq worker --prefetch) to at "
                f"least {self.max_size}, or {2 * self.max_size} to fill the next batch "
                f"while one runs"
            )


class BatchItemFailed(Exception):
    """The failure :meth:`BatchResult.retry` records for one message of a batch."""


@dataclass(frozen=True, kw_only=True, slots=True)
class BatchContext:
    """What a batch handler may know about its deliveries besides the messages.

    ``contexts[i]`` is the :class:`~rabbitq.Context` of the handler's ``msgs[i]``
    (its ``message_id``, ``attempt``, headers...); ``keys[i]`` its idempotency key (the
    handler's ``key(message)``, else the ``message_id``: pass them to a provider that
    takes idempotency keys). A batch handler has no ``publish`` or ``transaction``:
    see docs/batches.md.
    """

    queue: str
    type: str
    contexts: tuple[Context, ...]
    keys: tuple[str, ...]

    @property
    def size(self) -> int:
        """How many messages the handler was given."""
        return len(self.contexts)

    @property
    def message_ids(self) -> tuple[str, ...]:
        """The messages' ``message_id``, in the order of the handler's list."""
        return tuple(c.message_id for c in self.contexts)


Item = int | Message  # a message of the batch: its index in the handler's list, or itself


class BatchResult:
    """The messages of a batch that failed; every message not named here is acked.

    Name a message by its index in the list the handler was given, or by the message
    object itself. :meth:`retry` sends it through its retry policy as if a single
    handler had raised (the next tier, or the DLQ with reason ``exhausted`` after its
    last attempt); :meth:`dead_letter` sends it to the DLQ now (reason ``permanent``);
    :meth:`fail` with any exception does what raising it from a single handler does
    (:class:`~rabbitq.RetryLater` included). A message named twice, or one that is not
    in the batch, is a :class:`~rabbitq.ConfigurationError` (the whole batch fails).
    """

    __slots__ = ("_failed",)

    def __init__(self) -> None:
        self._failed: list[tuple[Item, Exception]] = []

    def fail(self, item: Item, error: Exception) -> BatchResult:
        """Settle ``item`` as if its handler had raised ``error``."""
        if not isinstance(error, Exception):
            raise ConfigurationError(f"BatchResult.fail() takes an exception, not {error!r}")
        if isinstance(item, bool) or not isinstance(item, int | Message):
            raise ConfigurationError(
                f"a batch's message is named by its index or the message itself, not {item!r}"
            )
        self._failed.append((item, error))
        return self

    def retry(self, item: Item, why: str = "failed in its batch") -> BatchResult:
        """Retry ``item`` as its retry policy says (its attempt counts)."""
        return self.fail(item, BatchItemFailed(why))

    def dead_letter(self, item: Item, why: str = "dead-lettered by its batch") -> BatchResult:
        """Send ``item`` to the DLQ now, with reason ``permanent``."""
        return self.fail(item, PermanentError(why))

    def __iter__(self) -> Iterator[tuple[Item, Exception]]:
        return iter(self._failed)

    def __len__(self) -> int:
        return len(self._failed)

    def __repr__(self) -> str:
        return f"BatchResult({len(self._failed)} failed)"
