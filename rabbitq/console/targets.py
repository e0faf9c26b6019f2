"""What the console shows: each service queue with its retry queues and DLQ (pure).

``MODULE:APP`` gives an app's exact topology; a plain queue name gets the retry queues
of the default retry policy (as ``rabbitq stats QUEUE`` does), and those that do not
exist are left out of the page.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .._amqp.topology import dlq_name, retry_queue_name
from ..app import App
from ..crypto.codec import cipher_of
from ..retry import RetryPolicy


@dataclass(frozen=True, kw_only=True)
class Target:
    """One service queue: ``queues`` is ``(name, kind)`` for main, retries and DLQ;
    ``types`` the message types its app handles (none known for a plain queue name)."""

    label: str
    queue: str
    queues: tuple[tuple[str, str], ...]
    exact: bool  # from an app's topology (every queue expected to exist)
    types: tuple[str, ...] = ()
    cipher: Any = None  # an encrypted app's: its messages shown decrypted (docs/privacy.md)

    @property
    def dlq(self) -> str:
        """The DLQ's name."""
        return dlq_name(self.queue)


def from_app(label: str, app: App) -> Target:
    """The target for a loaded app."""
    plan = app.topology()
    return Target(
        label=label,
        queue=plan.main.name,
        queues=tuple((q.name, q.kind) for q in plan.queues),
        exact=True,
        types=tuple(sorted(app.handlers)),
        cipher=cipher_of(app),
    )


def from_queue(name: str) -> Target:
    """The target for a plain queue name (default retry delays)."""
    retries = tuple(
        (retry_queue_name(name, ms), "retry") for ms in sorted(set(RetryPolicy().delays_ms))
    )
    return Target(
        label=name,
        queue=name,
        queues=((name, "main"), *retries, (dlq_name(name), "dlq")),
        exact=False,
    )
