"""Periodic schedules: ``@app.schedule(cron=..., tz=...)`` or ``@app.schedule(every=...)``
(docs/schedules.md).

- :mod:`~rabbitq.schedule.cron`: cron expressions and their next fire time (pure);
- :mod:`~rabbitq.schedule.spec`: a :class:`Schedule`, :func:`tick_id`, the app's registry
  (pure);
- :mod:`~rabbitq.schedule.plan`: queue names, the progress record, catch-up (pure);
- :mod:`~rabbitq.schedule.metrics`: :class:`ScheduleMetrics`;
- :mod:`~rabbitq.schedule.runner`: :class:`Scheduler`, the lease and the tick loop (I/O);
- :mod:`~rabbitq.schedule.tick`: a tick's messages and progress in one transaction (I/O);
- :mod:`~rabbitq.schedule.listing`: what ``rabbitq schedule list`` shows (I/O).
"""

from .metrics import ScheduleMetrics
from .runner import Scheduler
from .spec import Schedule, tick_id

__all__ = ["Schedule", "ScheduleMetrics", "Scheduler", "tick_id"]
