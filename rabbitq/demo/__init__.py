"""``rabbitq demo``: a small email and payment service, run end to end on a real broker.

:mod:`.scenario` is the demo's app, batch and expected tally (data); :mod:`.run` runs
it against a broker; :mod:`.view` shows it. Importing this package registers the
demo's message types, so the CLI imports it only when the demo runs.
"""

from .run import CleanupResult, cleanup, run_demo
from .scenario import (
    DEFAULT_COUNT,
    DEMO_EXCHANGE,
    DEMO_QUEUE,
    Counts,
    DemoSummary,
    DemoTally,
    Planned,
    build_app,
    expected_counts,
    plan_batch,
)
from .view import Display, print_summary

__all__ = [
    "DEFAULT_COUNT",
    "DEMO_EXCHANGE",
    "DEMO_QUEUE",
    "CleanupResult",
    "Counts",
    "DemoSummary",
    "DemoTally",
    "Display",
    "Planned",
    "build_app",
    "cleanup",
    "expected_counts",
    "plan_batch",
    "print_summary",
    "run_demo",
]
