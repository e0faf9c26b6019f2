"""Priority lanes, without a broker (rabbitq._amqp.lanes): names, the topology, what a
publish step does, where a lane's retry goes; and an app without priorities unchanged."""

from __future__ import annotations

import orjson
import pytest
from click.testing import CliRunner

from rabbitq import App, ConfigurationError, Message, RetryPolicy
from rabbitq._amqp import copy
from rabbitq._amqp.lanes import (
    PRIORITY,
    PriorityStep,
    check_priorities,
    check_priority,
    lane_key,
    lane_queue,
    share,
    weight,
)
from rabbitq._amqp.outgoing import Outgoing
from rabbitq._amqp.properties import new as new_properties
from rabbitq._amqp.topology import plan
from rabbitq.cli import main
from rabbitq.ladder.plan import DELAY_TO
from rabbitq.outcome import Retry
from tests.amqp.test_copy import Delivery


class Mail(Message, type="lanes.mail"):
    to: str


def _app(**kwargs: object) -> App:
    app = App(queue="mails", retry=RetryPolicy(delays=(1, 10)), **kwargs)  # type: ignore[arg-type]
    app.handler(Mail)(lambda m: None)
    return app


def test_an_app_without_priorities_declares_exactly_what_it_did():
    for priorities in (0, 1):
        topology = _app(priorities=priorities).topology()
        assert topology == plan(
            queue="mails", exchange="rabbitq", delays_ms=(1000, 10_000),
            routing_keys=("lanes.mail",), queue_type="quorum",
        )  # fmt: skip
        assert topology.lanes == () and topology.lane_bindings == ()
        assert _app(priorities=priorities).publish_steps == ()


def test_each_level_above_zero_has_a_lane_with_the_main_queues_arguments_and_binding():
    topology = _app(priorities=3).topology()
    assert [q.name for q in topology.lanes] == ["mails.prio.1", "mails.prio.2"]
    assert {q.kind for q in topology.lanes} == {"main"}
    assert all(q.arguments == topology.main.arguments for q in topology.lanes)
    assert topology.lane_bindings == (
        ("mails.prio.1", "lanes.mail.prio.1"),
        ("mails.prio.2", "lanes.mail.prio.2"),
    )
    assert [name for name, _ in topology.depth_specs()][:3] == [
        "mails", "mails.prio.1", "mails.prio.2",
    ]  # fmt: skip
    assert topology.dlq.name == "mails.dlq"  # one DLQ for every lane


def test_names_weights_and_shares():
    assert lane_queue("q", 0) == "q" and lane_queue("q", 2) == "q.prio.2"
    assert lane_key("t.x", 0) == "t.x" and lane_key("t.x", 1) == "t.x.prio.1"
    assert [weight(n) for n in range(3)] == [1, 2, 4]
    assert share(0, {0, 2}) == pytest.approx(1 / 5)
    assert share(0, {0, 1, 2}) == pytest.approx(1 / 7)
    assert share(0, {0}) == 1.0


@pytest.mark.parametrize(
    ("priorities", "partitions", "error"),
    [
        (11, 0, "priorities must be 0 to 10, not 11"),
        (-1, 0, "priorities must be 0 to 10"),
        (True, 0, "priorities must be 0 to 10"),
        (3, 2, "priorities cannot be combined with partitions"),
    ],
)
def test_bad_priorities_are_refused_in_one_line(priorities, partitions, error):
    with pytest.raises(ConfigurationError, match=error) as caught:
        check_priorities(priorities, partitions=partitions)
    assert "\n" not in str(caught.value)
    with pytest.raises(ConfigurationError, match=error):
        App(queue="q", priorities=priorities, partitions=partitions)


def test_priorities_and_ordered_handlers_are_refused_in_one_line():
    app = App(queue="q", priorities=2)
    app.handler(Mail, ordered_by=lambda m: m.to)(lambda m: None)
    with pytest.raises(ConfigurationError, match="cannot be combined with ordered_by"):
        app.topology()


@pytest.mark.parametrize(
    ("priority", "priorities", "error"),
    [
        (1, 0, r"priority=1 needs an app with priorities: App\(priorities=N\)"),
        (3, 3, r"priority must be 0 to 2 \(App\(priorities=3\)\), not 3"),
        (-1, 3, "priority must be 0 to 2"),
        ("2", 3, "priority must be an int"),
    ],
)
def test_a_bad_priority_is_refused_before_anything_is_sent(priority, priorities, error):
    with pytest.raises(ConfigurationError, match=error):
        check_priority(priority, priorities)


async def test_an_app_without_priorities_refuses_a_priority_at_publish_before_connecting():
    pub = _app().publisher(url="amqp://guest:guest@127.0.0.1:1/")  # never opened
    with pytest.raises(ConfigurationError, match="needs an app with priorities"):
        await pub.publish(Mail(to="a"), priority=1)


def _outgoing(priority: int) -> Outgoing:
    msg = Mail(to="a")
    return Outgoing(
        message=msg, type_name="lanes.mail", body=b"{}", props=new_properties(msg),
        exchange="rabbitq", routing_key="lanes.mail", queue="mails",
        options={"priority": priority} if priority else {},
    )  # fmt: skip


async def test_the_publish_step_routes_into_the_lane_and_says_the_level():
    sent: list[Outgoing] = []

    async def send(out: Outgoing) -> str:
        sent.append(out)
        return out.message_id

    step = PriorityStep("mails", 3)
    await step(_outgoing(2), send)
    await step(_outgoing(0), send)
    high, low = sent
    assert (high.routing_key, high.queue, high.headers[PRIORITY]) == (
        "lanes.mail.prio.2", "mails.prio.2", 2,
    )  # fmt: skip
    assert (low.routing_key, low.queue, PRIORITY in low.headers) == ("lanes.mail", "mails", False)


def test_a_lanes_retry_goes_through_the_ladder_back_to_the_lane_and_lane_zeros_as_before():
    topology = _app(priorities=3).topology()
    kw = {"type_name": "lanes.mail", "error": "E: x", "topology": topology}
    lane = copy.retry(Delivery(), Retry(1000, 2), queue="mails.prio.2", **kw)  # type: ignore[arg-type]
    assert lane.exchange.startswith("rabbitq.delay.")
    assert (lane.properties.headers or {})[DELAY_TO] == "mails.prio.2"
    main = copy.retry(Delivery(), Retry(1000, 2), queue="mails", **kw)  # type: ignore[arg-type]
    assert (main.exchange, main.target) == ("", "mails.retry.1s")



def test_rabbitq_topology_dry_run_shows_every_lane_and_its_bindings(tmp_path, monkeypatch):
    (tmp_path / "lanes_cli_app.py").write_text(
        "from rabbitq import App, Message\n"
        "class Send(Message, type='lanes.cli.send'):\n    to: str\n"
        "app = App(queue='emails', priorities=3)\n"
        "app.handler(Send)(lambda m: None)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    args = ["topology", "lanes_cli_app:app", "--dry-run", "--json", "--url", "amqp://x@127.0.0.1:1/"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    names = {(row["kind"], row["name"]) for row in orjson.loads(result.output)}
    assert {("main", "emails.prio.1"), ("main", "emails.prio.2")} <= names
    assert ("binding", "rabbitq -> emails.prio.2") in names
    assert ("binding", "rabbitq.delay.deliver -> emails.prio.2") in names


def test_an_unroutable_priority_publish_names_its_lane_queue() -> None:
    app = App(queue="emails", priorities=3)

    @app.handler(Mail)
    async def handle(msg: Mail) -> None:
        pass

    said = app.topology().unroutable(f"{Mail.type_name()}.prio.2", None)
    assert said.startswith("queue 'emails.prio.2' is not declared yet")
