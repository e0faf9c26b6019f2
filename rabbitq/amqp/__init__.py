"""The AMQP edge: the code that talks to aio-pika, aiormq and pamqp for publishing and
connecting.

:mod:`.connection` (connecting, with actionable errors), :mod:`.wire` (tolerant frame
decoding and encodable headers), :mod:`.properties` (the properties of every message
rabbitq publishes, one function per kind), :mod:`.confirm` (the one confirmed publish,
and the one mapping of aiormq's errors to rabbitq's) and :mod:`.publisher` (the
:class:`~rabbitq.Publisher`). Topology declaration stays in :mod:`rabbitq.amqp.topology`,
next to the pure names it declares.
"""
