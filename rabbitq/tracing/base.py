"""The tracing observer the worker, the publisher and the DLQ tools call: no-op here.

Like :class:`~rabbitq.Hooks`, but per message: :meth:`Tracing.publish` and
:meth:`Tracing.replay` return a span for one send, :meth:`Tracing.deliver` one for a
delivery from its arrival to its settlement. Each may write trace headers into the
copy it is about to send. Every method of these base classes does nothing and costs a
call, so a worker without tracing pays next to nothing;
:class:`rabbitq.tracing.OpenTelemetry` is the real one.

Headers (see docs/providers.md): ``traceparent`` / ``tracestate`` (W3C) name the span
that first published the message, and are kept on retry copies, DLQ copies and
replays, so that a message's whole life is one trace; ``rabbitq-previous-span`` names
the span that sent this copy (the failed attempt, or the replay), which the next
delivery's span links to.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
PREVIOUS_SPAN = "rabbitq-previous-span"


class SendSpan:
    """One publish (or replay) of one message: no-op base."""

    __slots__ = ()

    def end(self, error: BaseException | None = None) -> None:
        """The send was confirmed (``error`` None) or failed."""


class DeliverySpan:
    """One delivery, from its arrival to its settlement: no-op base."""

    __slots__ = ()

    def activate(self) -> contextlib.AbstractContextManager[None]:
        """Make this span the current one (around the handler: its logs, its publishes)."""
        return contextlib.nullcontext()

    def copied(self, headers: dict[str, Any]) -> None:
        """A retry or DLQ copy with ``headers`` is about to be sent from this delivery."""

    def retried(self, delay: str, next_attempt: int, deferred: bool, error: str | None) -> None:
        """The decision was a retry in tier ``delay`` (``deferred``: by RetryLater)."""

    def dead_lettered(self, reason: str, error: str | None) -> None:
        """The decision was the DLQ with ``reason``."""

    def duplicate(self) -> None:
        """The delivery's idempotency key was handled before: acked, not run."""

    def skipped(self, state: str) -> None:
        """The delivery was acked without running, as ``state`` says (``cancelled``,
        ``superseded``)."""

    def end(self, outcome: str, error: str | None = None) -> None:
        """The delivery is settled: ``success``, ``retried``, ``dead_lettered``, ``requeued``."""


NO_SEND = SendSpan()
NO_DELIVERY = DeliverySpan()


class Tracing:
    """No tracing: the default. Subclass it, or use :class:`rabbitq.tracing.OpenTelemetry`."""

    enabled = False

    def publish(
        self,
        headers: dict[str, Any],
        *,
        exchange: str,
        routing_key: str,
        type_name: str,
        message_id: str,
        correlation_id: str | None,
        body_size: int,
    ) -> SendSpan:
        """A message is about to be published with ``headers`` (written in place)."""
        return NO_SEND

    def replay(
        self,
        headers: dict[str, Any],
        *,
        queue: str,
        message_id: str,
        correlation_id: str | None,
    ) -> SendSpan:
        """A DLQ message is about to be replayed to ``queue`` with ``headers``."""
        return NO_SEND

    def deliver(
        self,
        headers: Mapping[str, Any],
        *,
        queue: str,
        type_name: str,
        routing_key: str,
        message_id: str,
        correlation_id: str | None,
        attempt: int,
        body_size: int,
        exchange: str = "",
        delivery_tag: int | None = None,
    ) -> DeliverySpan:
        """A delivery arrived from ``queue`` with ``headers``, published to ``exchange``
        ("": the default exchange) with ``routing_key``; ``delivery_tag`` is its tag on
        the worker's channel."""
        return NO_DELIVERY

    def purged(self, *, queue: str, message_id: str) -> None:
        """A message was deleted from the DLQ ``queue`` (``rabbitq dlq purge``)."""

    async def flush(self) -> None:
        """Write what this observer buffers (the status recorder does): called when a
        publisher closes, a worker stops and a DLQ operation ends."""


NO_TRACING = Tracing()
