"""Running workers in production: the one worker wiring and what surrounds it.

:mod:`.run` (build and run a worker from a :class:`~rabbitq.ops.run.WorkerSpec`, in
one process or in each supervised one), :mod:`.supervisor` (start, watch, restart and
stop worker processes), :mod:`.status` (what a worker process reports to it),
:mod:`.metrics` and :mod:`.endpoints` (Prometheus hooks, ``/metrics``, ``/healthz``,
``/readyz``), :mod:`.logs`, :mod:`.loop` (uvloop when installed) and
:mod:`.containers` (a throwaway broker for the demo and the tests).
"""
