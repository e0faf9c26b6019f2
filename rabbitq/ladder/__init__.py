"""The delay ladder: any delay from 0 to 48 days, held by the broker (docs/delays.md).

Internal: users delay with ``publish(delay=..., at=...)``. The one name exported is
:func:`due_in`, the check of ``delay=`` and ``at=`` (examples/reminder_email.py calls it
to refuse a bad time before connecting); the ladder's wire constants and plan are
imported from their module, :mod:`rabbitq.ladder.plan`.

``plan`` is pure: the ladder's names, arguments and bindings, a delay's units, bits and
routing key, the checks on ``delay=`` and ``at=``. ``declare`` is its only I/O. The
publisher (``publish(delay=..., at=...)``) and the worker (``RetryLater``) send through
it with :func:`plan.entry`; ``topology.declare`` declares it beside each app's queues.
"""

from .plan import due_in

__all__ = ["due_in"]
