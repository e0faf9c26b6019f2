"""``rabbitq publish --priority / --unique-for / --unique-key / --debounce`` map to
``publish()``'s options, and ``--at`` in the past is refused (issue 41, item 9 and the
smaller items): bad values are one line and exit 2 before connecting; good ones reach
the broker (a priority's lane, one message per unique key), through the real command."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest

from tests.helpers import REDIS_URL, assert_one_line_error, run_cli

APP = "tests.cli.publish_options_app:app"
PLAIN = "examples.email_service:app"  # no lanes, no store
EMAIL = ("email.send", '{"to": "a@example.com", "subject": "s", "body": "b"}')
REPORT = ("t.publish.report", '{"name": "q3"}')
DOWN = "amqp://guest:guest@127.0.0.1:1/"  # a bad value is refused before connecting


@pytest.mark.parametrize(
    ("app", "args", "said"),
    [
        (PLAIN, ["--at", "2020-01-01T00:00:00Z"], "in the past"),
        (PLAIN, ["--priority", "2"], "App(priorities=N)"),
        (APP, ["--priority", "3"], "0 to 2"),
        (PLAIN, ["--priority", "-1"], "--priority"),
        (PLAIN, ["--unique-key", "k"], "--unique-key needs --unique-for or --debounce"),
        (PLAIN, ["--unique-for", "10m"], "needs a store"),
        (APP, ["--unique-for", "0"], "more than 0"),
        (APP, ["--unique-for", "1m", "--debounce", "1m", "--unique-key", "k"], "not go together"),
        (APP, ["--debounce", "5s"], "needs --unique-key"),
        (APP, ["--debounce", "5s", "--unique-key", "k", "--delay", "5"], "--debounce"),
        (APP, ["--debounce", "5s", "--unique-key", "k"], "debounce=True"),
        (APP, ["--unique-for", "1m", "--unique-key", ""], "--unique-key must be"),
    ],
)
def test_a_bad_publish_option_is_one_line_and_exit_2_before_connecting(app, args, said):
    kind, body = EMAIL if app == PLAIN else REPORT
    done = run_cli("publish", app, kind, body, *args, url=DOWN)
    assert said in assert_one_line_error(done, 2)


@pytest.fixture
def declared(broker_url: str) -> Iterator[dict[str, str]]:
    """The app's queues on the real broker under a name of this test's own (and a key
    prefix in Redis), deleted afterwards."""
    env = {
        "T_PUBLISH_QUEUE": f"t.pub.{uuid.uuid4().hex[:10]}",
        "T_PUBLISH_PREFIX": f"rabbitq-test:{uuid.uuid4().hex}:",
        "RABBITQ_TEST_REDIS": REDIS_URL,
        "RABBITQ_URL": broker_url,
    }
    done = run_cli("topology", APP, env=env)
    assert done.returncode == 0, done.stderr
    yield env
    gone = run_cli("topology", APP, "--delete", "--force", env=env)
    assert gone.returncode == 0, gone.stderr


def depths(env: dict[str, str]) -> dict[str, int]:
    done = run_cli("stats", APP, "--json", env=env)
    assert done.returncode == 0, done.stderr
    return {row["queue"]: row["messages"] for row in json.loads(done.stdout)}


@pytest.mark.services  # the real Redis holds the unique keys
def test_priority_reaches_its_lane_and_a_unique_key_is_sent_once(declared):
    queue = declared["T_PUBLISH_QUEUE"]
    high = run_cli("publish", APP, *REPORT, "--priority", "2", "--json", env=declared)
    assert high.returncode == 0, high.stderr
    assert json.loads(high.stdout)["deduplicated"] is False

    args = ["publish", APP, *REPORT, "--unique-for", "10m", "--unique-key", "q3", "--json"]
    first = run_cli(*args, env=declared)
    again = run_cli(*args, env=declared)
    assert first.returncode == 0 and again.returncode == 0, first.stderr + again.stderr
    first_doc, again_doc = json.loads(first.stdout), json.loads(again.stdout)
    assert (first_doc["deduplicated"], again_doc["deduplicated"]) == (False, True)
    assert again_doc["message_id"] == first_doc["message_id"]  # the holder's id
    plain = run_cli(*args[:-1], env=declared)
    assert plain.returncode == 0 and plain.stdout.startswith("not published:"), plain.stdout

    shown = depths(declared)
    assert (shown[queue], shown[f"{queue}.prio.2"]) == (1, 1)
