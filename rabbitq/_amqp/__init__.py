"""Internal: the machinery of the broker edge (a private package; what users call is re-exported
by ``rabbitq`` itself, docs/reference/). The broker edge: everything about RabbitMQ and
its wire.

:mod:`.connection` (connecting, with actionable errors; :mod:`.refusal`,
:mod:`.failover`), :mod:`.wire` (tolerant frame decoding and encodable headers),
:mod:`.blocked` (a blocked connection noticed), :mod:`.brokers` (what each RabbitMQ
version does), :mod:`.topology` (queue names and arguments, pure, and the one
``declare``; :mod:`.orphans`), :mod:`.headers` (rabbitq's headers), :mod:`.properties`
(the properties of every message rabbitq publishes, one function per kind),
:mod:`.copy` (every copy rabbitq publishes of a message it read, and where it goes),
:mod:`.confirm` (the one confirmed publish, and the one mapping of aiormq's errors to
rabbitq's; :mod:`.inflight`) and :mod:`.publisher` (the :class:`~rabbitq.Publisher`).
"""
