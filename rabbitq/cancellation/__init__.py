"""Cancelling queued work: ``App(cancellable=True)`` and ``await app.cancel(message_id)``
(docs/control.md, "Cancel").

- :mod:`.model`: what a cancel reports per message id, and how long a cancellation is
  kept (pure);
- :mod:`.store`: the cancellations store's protocol and where it lives (the app's
  PostgreSQL or Redis);
- :mod:`.postgres`, :mod:`.redis`: the two stores;
- :mod:`.stage`: the delivery stage ``cancelled`` (a cancelled message acked unrun;
  ``ctx.cancelled`` for a running one);
- :mod:`.cancel`: ``app.cancel``: record the cancellations, report what each message was.
"""

from __future__ import annotations

from .model import CancelReport

__all__ = ["CancelReport"]
