"""What a supervised worker process reports to its supervisor, in shared memory.

Each worker process writes two numbers into its slot: a heartbeat
(``time.monotonic()``) and a state code. The supervisor's ``/healthz`` and ``/readyz``
read them. The code of a state is its index in :data:`STATES`; code 1 is "ready".
"""

from __future__ import annotations

from .._worker.consumer import NOT_CONNECTED, NOT_CONSUMING, STARTING

REPORT_INTERVAL = 0.5  # seconds between two reports of a worker process
STATES: tuple[str | None, ...] = (STARTING, None, NOT_CONNECTED, NOT_CONSUMING)
READY = 1
UNKNOWN_STATE = len(STATES)


def state_code(reason: str | None) -> int:
    """The number a worker writes for :meth:`Worker.health`'s answer."""
    return STATES.index(reason) if reason in STATES else UNKNOWN_STATE


def state_reason(code: int) -> str | None:
    """The readiness reason of a state code (None: ready)."""
    return STATES[code] if 0 <= code < len(STATES) else "not ready"
