"""Hooks: how cross-cutting concerns (metrics, the demo's live summary) observe a worker.

Subclass :class:`Hooks` and override what you need; every method is a no-op by
default and is called on the event loop, so it must be quick and must not raise.
Every delivery ends in exactly one of ``succeeded``, ``retried``, ``dead_lettered``
or ``requeued`` (returned to its queue because its outcome could not be made safe,
or because the worker shut down before the handler finished).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

UNKNOWN = "unknown"  # the type label of a delivery whose type cannot be trusted
# Why the worker declared its queues again (``topology_redeclared``'s reason): the broker
# cancelled its consumer (the main queue was deleted), or a copy to one of the app's
# queues came back unroutable (a retry queue or the DLQ was deleted).
CONSUMER_CANCELLED = "consumer_cancelled"
UNROUTABLE_COPY = "unroutable"
REDECLARE_REASONS = (CONSUMER_CANCELLED, UNROUTABLE_COPY)


class Hooks:
    """No-op base class of worker and publisher hooks."""

    def received(self, queue: str, type_name: str) -> None:
        """A delivery arrived (``type_name`` is ``unknown`` if no handler knows it)."""

    def succeeded(self, queue: str, type_name: str, duration: float) -> None:
        """The handler returned and the delivery's ack was written (acks are coalesced,
        so this comes a few milliseconds after the handler at most)."""

    def retried(self, queue: str, type_name: str, delay: str, duration: float) -> None:
        """A confirmed copy went to the retry queue with the ``delay`` label."""

    def dead_lettered(self, queue: str, type_name: str, reason: str, duration: float) -> None:
        """A confirmed copy went to the DLQ with ``reason``."""

    def duplicate(self, queue: str, type_name: str) -> None:
        """The delivery's idempotency key was handled before: acked without running the
        handler (``succeeded`` follows, as for any ack)."""

    def requeued(self, queue: str, type_name: str) -> None:
        """The delivery went back to its queue (nack with requeue)."""

    def keys_blocked(self, queue: str, keys: tuple[str, ...]) -> None:
        """The ordered keys blocked in this worker now (``on_dead="block"``)."""

    def handler_started(self, queue: str) -> None:
        """A handler began (in-flight count up)."""

    def handler_finished(self, queue: str) -> None:
        """A handler ended, however it ended (in-flight count down)."""

    def unacked_changed(self, queue: str, unacked: int) -> None:
        """This worker now holds ``unacked`` deliveries of ``queue``: received and not
        settled yet (running, waiting for a limit, an ordered key or a batch, or for
        their copy's confirm), which RabbitMQ counts as unacknowledged."""

    def batch_flushed(self, queue: str, type_name: str, size: int, trigger: str) -> None:
        """A batch of ``size`` deliveries was handed to its batch handler; ``trigger`` is
        ``full`` (``max_size``), ``max_wait`` or ``stopping`` (the worker stops)."""

    def limit_waited(self, queue: str, type_name: str, seconds: float) -> None:
        """A delivery of a rate- or concurrency-limited handler waited ``seconds`` for
        its turn (called once per delivery of such a handler, 0 when it did not wait)."""

    def limit_running(self, queue: str, type_name: str, running: int) -> None:
        """A limited handler now has ``running`` calls in progress in this process."""

    def connection_changed(self, up: bool) -> None:
        """The broker connection was established (True) or lost (False)."""

    def consuming_changed(self, queue: str, consuming: bool) -> None:
        """The worker started or stopped consuming ``queue``."""

    def prefetch_changed(self, queue: str, prefetch: int) -> None:
        """The worker set its prefetch (handlers in flight at most) for ``queue``."""

    def breaker_changed(self, queue: str, state: str) -> None:
        """The circuit breaker of ``queue`` is now ``closed``, ``open`` or ``half-open``."""

    def connection_blocked(self, reason: str | None) -> None:
        """The broker blocks the connection (a resource alarm: ``reason`` is one line such
        as ``broker blocked: memory alarm``), or no longer does (None)."""

    def copies_held(self, queue: str, held: int, reason: str | None) -> None:
        """``held`` deliveries of ``queue`` wait for a copy the broker refused (a full
        DLQ or retry queue) or did not confirm in time; the consumer is paused while
        any do. ``reason`` is one line, None when ``held`` is 0."""

    def topology_redeclared(self, queue: str, reason: str) -> None:
        """The worker declared its queues again because one went away (``reason``: one of
        ``REDECLARE_REASONS``, ``consumer_cancelled`` or ``unroutable``)."""

    def handler_thread_abandoned(self, queue: str, type_name: str, abandoned: int) -> None:
        """A sync handler of ``type_name`` ran past its timeout and keeps its thread;
        ``abandoned`` threads are now held by such handlers."""

    def handler_thread_returned(self, queue: str, type_name: str, abandoned: int) -> None:
        """A sync handler of ``type_name`` that had run past its timeout returned at last;
        its thread rejoins the pool, and ``abandoned`` threads are still held."""

    def published(self, exchange: str, type_name: str) -> None:
        """A publish was confirmed."""

    def publish_failed(self, exchange: str, type_name: str, error: str) -> None:
        """A publish failed; ``error`` is one of unroutable, nacked, interrupted."""


class HookSet(Hooks):
    """Calls each of several hooks in order; its methods are made by :func:`_fan_out`."""

    def __init__(self, hooks: list[Hooks]) -> None:
        self.hooks = hooks


def _fan_out(name: str) -> Callable[..., None]:
    def method(self: HookSet, *args: Any) -> None:
        for hook in self.hooks:
            getattr(hook, name)(*args)

    method.__name__ = name
    method.__doc__ = getattr(Hooks, name).__doc__
    return method


for _name in [n for n in vars(Hooks) if not n.startswith("_")]:
    setattr(HookSet, _name, _fan_out(_name))


def combine(hooks: Hooks | list[Hooks] | tuple[Hooks, ...] | None) -> Hooks:
    """One :class:`Hooks` for none, one or several."""
    if hooks is None:
        return Hooks()
    if isinstance(hooks, Hooks):
        return hooks
    items = list(hooks)
    if len(items) == 1:
        return items[0]
    return HookSet(items)
