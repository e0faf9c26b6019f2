"""``rabbitq cancel`` as a real subprocess: one line per id, ``--json``, and the exit
codes of docs/cli.md (0 recorded, 1 the store cannot be written or the app cannot
cancel, 2 no id)."""

from __future__ import annotations

import orjson
import pytest

from rabbitq.cancellation.model import NOT_DURABLE
from rabbitq.status.model import Record
from tests.helpers import assert_one_line_error, run_cli_async

pytestmark = pytest.mark.services  # the real Redis

APP = "tests.cancellation.cancel_cli_app"


async def test_one_line_per_id_and_json(redis_prefix: str) -> None:
    from rabbitq.backends import RedisBackend

    status = RedisBackend(key_prefix=redis_prefix).status()
    await status.write(
        [
            Record("m-done", "published", 1000.0),
            Record("m-done", "succeeded", 1001.0, 1),
            Record("m-wait", "published", 1000.0),
        ]
    )
    await status.close()
    env = {"RABBITQ_TEST_CANCEL_PREFIX": redis_prefix}
    result = await run_cli_async(
        "cancel", f"{APP}:app", "m-done", "m-wait", "m-none", "--unknown-ok", env=env
    )
    assert result.returncode == 0, result.stderr
    again = await run_cli_async("cancel", f"{APP}:app", "m-wait", "--json", env=env)
    assert again.returncode == 0, again.stderr
    (found,) = orjson.loads(again.stdout)
    assert found["outcome"] == "already-cancelled" and found["message_id"] == "m-wait"
    # the shared Redis may keep no AOF: then each cancel that counts says so
    assert found["durable"] in (True, False)
    note = "" if found["durable"] else NOT_DURABLE
    assert result.stdout.splitlines() == [
        "m-done: already handled at 1970-01-01 00:16:41 UTC: not cancelled",
        "m-wait: cancelled: it was published at 1970-01-01 00:16:40 UTC; it will be acked unrun"
        + note,
        "m-none: unknown: no record of it (cancelled if it arrives)" + note,
    ]


async def test_exit_codes() -> None:
    down = await run_cli_async("cancel", f"{APP}:down", "m1")
    assert "cannot" in assert_one_line_error(down, 1).lower()
    plain = await run_cli_async("cancel", f"{APP}:plain", "m1")
    assert "cancellable=True" in assert_one_line_error(plain, 1)
    missing = await run_cli_async("cancel", f"{APP}:app")
    assert missing.returncode == 2
