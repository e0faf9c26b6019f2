"""The rate-limit tests' Redis keys: each test gets a prefix of its own, cleaned after."""

from __future__ import annotations

import pytest


@pytest.fixture
def prefix(redis_prefix: str) -> str:
    return redis_prefix
