"""``rabbitq cancel`` resolves a short id against the app's status store as ``dlq show``
resolves one against the DLQ, and refuses an ambiguous prefix or an unknown id (exit 2,
nothing recorded) unless ``--unknown-ok`` (issue 41, item 4): as a real subprocess over
the real Redis."""

from __future__ import annotations

import orjson
import pytest

from rabbitq.backends import RedisBackend
from rabbitq.cli.cancel import Found, resolve
from rabbitq.status.model import Record
from tests.helpers import REDIS_URL, assert_one_line_error, run_cli_async

APP = "tests.cancellation.cancel_cli_app:app"
FULL = "6f1c0e2a9b3d4c5e8f7a6b5c4d3e2f1a"
TWIN = "ab12cd34000000000000000000000001"
TWIN2 = "ab12cd34000000000000000000000002"


def test_resolving_is_a_pure_decision_an_exact_id_a_unique_prefix_or_a_one_line_refusal():
    assert resolve(Found("x", exact=True, starting=None), unknown_ok=False) == "x"
    assert resolve(Found("6f1c", exact=False, starting=[FULL]), unknown_ok=False) == FULL
    with pytest.raises(Exception, match="ambiguous") as ambiguous:
        resolve(Found("ab12", exact=False, starting=[TWIN, TWIN2]), unknown_ok=True)
    assert TWIN in str(ambiguous.value) and TWIN2 in str(ambiguous.value)
    with pytest.raises(Exception, match="--unknown-ok"):
        resolve(Found("nope", exact=False, starting=[]), unknown_ok=False)
    assert resolve(Found("nope", exact=False, starting=[]), unknown_ok=True) == "nope"


async def _published(prefix: str, *ids: str) -> None:
    status = RedisBackend(REDIS_URL, key_prefix=prefix).status()
    await status.write([Record(mid, "published", 1000.0) for mid in ids])
    await status.close()


@pytest.mark.services
async def test_a_unique_prefix_cancels_the_whole_id(redis_prefix: str) -> None:
    await _published(redis_prefix, FULL)
    env = {"RABBITQ_TEST_CANCEL_PREFIX": redis_prefix}
    done = await run_cli_async("cancel", APP, FULL[:8], "--json", env=env)
    assert done.returncode == 0, done.stderr
    (report,) = orjson.loads(done.stdout)
    assert report["message_id"] == FULL and report["outcome"] == "cancelled"
    # the whole id is what the worker will find cancelled
    status = await run_cli_async("status", APP, FULL, "--json", env=env)
    assert orjson.loads(status.stdout)["state"] == "cancelled", status.stdout


@pytest.mark.services
async def test_an_ambiguous_prefix_or_an_unknown_id_is_refused_and_nothing_is_recorded(
    redis_prefix: str,
) -> None:
    await _published(redis_prefix, TWIN, TWIN2, FULL)
    env = {"RABBITQ_TEST_CANCEL_PREFIX": redis_prefix}

    ambiguous = await run_cli_async("cancel", APP, FULL, "ab12", env=env)
    line = assert_one_line_error(ambiguous, 2)
    assert "ambiguous" in line and TWIN in line and TWIN2 in line

    unknown = await run_cli_async("cancel", APP, FULL, "6f1c0e2b", env=env)
    assert "--unknown-ok" in assert_one_line_error(unknown, 2)
    as_json = await run_cli_async("cancel", APP, "6f1c0e2b", "--json", env=env)
    assert orjson.loads(as_json.stdout)["exit_code"] == 2 and as_json.returncode == 2
    # refused before anything was recorded: FULL, given beside them, was not cancelled
    status = await run_cli_async("status", APP, FULL, "--json", env=env)
    assert orjson.loads(status.stdout)["state"] == "published", status.stdout

    anyway = await run_cli_async("cancel", APP, "not-yet-published", "--unknown-ok", env=env)
    assert anyway.returncode == 0, anyway.stderr
    assert anyway.stdout.startswith(  # (then whether the store keeps it across a restart)
        "not-yet-published: unknown: no record of it (cancelled if it arrives)"
    )
