"""``MODULE:APP`` for tests/integration/schedule/test_pause.py: the test puts its own app
here (``app``) before it runs the CLI in-process."""

from __future__ import annotations

from rabbitq import App

app: App | None = None
