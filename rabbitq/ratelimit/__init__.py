"""Rate and concurrency limits per handler (``@app.handler(M, rate_limit="14/s")``).

``rate.py`` parses rates and holds the pure GCRA decision; ``local.py`` keeps budgets
in one process; ``shared.py`` keeps them in Redis for every process and machine, and
``lease.py`` / ``cap.py`` the concurrency places shared there;
``gate.py`` is what the worker waits on before a limited handler runs (the worker's
side is :mod:`rabbitq._worker.admission`). See docs/providers.md. The package exports
the two rate backends a user gives an app; the rest is imported from its module.
"""

from .local import LocalRates
from .shared import RedisRates

__all__ = ["LocalRates", "RedisRates"]
