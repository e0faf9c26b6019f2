"""The per-message hot path: a :class:`~rabbitq.Worker` consuming one queue.

:mod:`.lifecycle` (the :class:`Worker`: connect, consume, settle, reconnect, drain),
:mod:`.dispatch` (one delivery to one decision; pure but for the handler call),
:mod:`.delivery` (a light delivery on aiormq's channel), :mod:`.acks` (coalesced acks)
and :mod:`.limits` (timeout checks). Nothing here imports :mod:`rabbitq.ops`,
:mod:`rabbitq.dlq` or :mod:`rabbitq.cli`.
"""
