"""Whose cancellation is this? The caller's, or a future that aiormq cancelled.

aiormq settles the futures of a connection it closes by cancelling them (a publish's
confirm, a drain, an opening handshake): code awaiting one sees ``CancelledError``
although its own task was never cancelled. Passing that on would look like a
cancellation to every caller above (a worker that stops, ``asyncio.timeout``), so
rabbitq turns it into its own error where it awaits aiormq, and passes on only the
caller's cancellations.
"""

from __future__ import annotations

import asyncio


def cancelled_by_caller() -> bool:
    """Whether the running task was cancelled (``task.cancel()``, a timeout), as opposed
    to having awaited a future that someone else cancelled."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
