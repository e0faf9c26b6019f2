"""examples/ledger.py's app under a test's own names, for the ``rabbitq`` command run as
a subprocess (``rabbitq worker tests.integration.dlq.ledger_cli_app:app``): the queue
from ``$LEDGER_TEST_QUEUE``, the exchange from ``$EXAMPLES_EXCHANGE`` (which
``python -m examples.ledger`` publishes to as well)."""

from __future__ import annotations

import os

from examples.ledger import create_app

app = create_app(queue=os.environ.get("LEDGER_TEST_QUEUE", "t-ledger-cli"))
