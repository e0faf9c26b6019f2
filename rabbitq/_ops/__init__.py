"""Internal: the machinery of running workers (a private package; what users call is re-exported
by ``rabbitq`` itself, docs/reference/). Running workers in production: the one worker
wiring and what surrounds it.

:mod:`.run` (build and run a worker from a :class:`~rabbitq._ops.run.WorkerSpec`, in
one process or in each supervised one), :mod:`.supervisor` (start, watch, restart and
stop worker processes), :mod:`.status` (what a worker process reports to it),
:mod:`.metrics`, :mod:`.sampler` and :mod:`.endpoints` (Prometheus hooks, queue depths,
``/metrics``, ``/healthz``, ``/readyz`` from the worker's health), :mod:`.doctor`
(with :mod:`.doctor_facts` and :mod:`.doctor_probe`), :mod:`.logs`, :mod:`.loop`
(uvloop when installed) and :mod:`.containers` (a throwaway broker for the demo and
the tests).
"""
