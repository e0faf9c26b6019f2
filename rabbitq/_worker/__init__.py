"""Internal: the machinery of the worker (a private package; what users call is re-exported by
``rabbitq`` itself, docs/reference/). The per-message hot path: a
:class:`~rabbitq.Worker` consuming one queue.

:mod:`.lifecycle` (the :class:`Worker`: it wires the rest, connects, reconnects and
drains), :mod:`.consumer` (the consumer, why it is paused, whether the worker is
ready), :mod:`.dispatch` (one delivery to one :mod:`.outcome`; pure but for the
handler call, :mod:`.handler_call`), :mod:`.settle` (ack, or copy, confirm and ack,
through :mod:`.copies` and :mod:`.acks`), :mod:`.breaker_guard`, :mod:`.admission`,
:mod:`.keeper` (the topology and the copy channel) and :mod:`.consumer_timeout`
(handler timeouts against the broker's). Nothing here imports :mod:`rabbitq.ops`,
:mod:`rabbitq.dlq` or :mod:`rabbitq.cli`; see docs/architecture.md.
"""
