"""``python -m bench.encryption`` keeps working: one tiny run of each mode (not a timed
test: the rates are not checked)."""

from __future__ import annotations

import pytest

from bench import encryption


@pytest.mark.parametrize("mode", encryption.MODES)
async def test_each_mode_publishes_and_consumes(mode, broker_url):
    result = await encryption.one(broker_url, 300, mode)
    assert set(result) == {"publish", "consume"}
    assert all(rate > 0 and cpu > 0 for rate, cpu in result.values())
