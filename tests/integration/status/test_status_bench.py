"""``python -m bench.status`` keeps working: one tiny run of each mode (not a timed test:
the rate is not checked, only that every record was written)."""

from __future__ import annotations

import pytest

from bench import status

pytestmark = [pytest.mark.broker]


@pytest.mark.parametrize("mode", status.MODES)
async def test_each_mode_consumes_and_writes_every_record(mode, broker_url):
    rate, cpu, counts = await status.consume(broker_url, 60, mode)
    assert rate > 0 and cpu > 0
    if mode == "no store":
        assert counts == {}
    else:
        assert counts == {"written": 180, "failed": 0, "dropped": 0}
