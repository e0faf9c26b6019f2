"""``rabbitq doctor`` on the delay ladder's catch-all (pure), and the DLQ tools reading
it: a delayed message there goes back to the queue it was delayed for."""

from __future__ import annotations

import shlex

from rabbitq._amqp.brokers import facts_for
from rabbitq._ops import doctor_ladder
from rabbitq._ops.doctor_facts import Facts
from rabbitq.app import App
from rabbitq.dlq.message import origin_of, resolve_dlq
from rabbitq.ladder.plan import DELAY_TO, UNDELIVERABLE, deliver_arguments
from rabbitq.ladder.probe import CatchAll


def facts(catch_all: CatchAll | None, *, policy: bool = False, vhost: str = "/") -> Facts:
    app = App(queue="emails")
    return Facts(broker=facts_for(None), topology=app.topology(), handlers=app.handlers,
                 queues={}, consumer_timeout=None, delay_catch_all=catch_all,
                 delay_alternate_policy=policy, vhost=vhost)  # fmt: skip


def test_no_ladder_no_finding_and_a_complete_empty_one_none_either():
    assert doctor_ladder.findings(facts(None)) == []
    assert doctor_ladder.findings(facts(CatchAll(has_argument=None, held=None))) == []
    assert doctor_ladder.findings(facts(CatchAll(has_argument=True, held=0))) == []


def test_an_older_deliver_exchange_gets_the_policy_that_adds_its_alternate_exchange():
    [found] = doctor_ladder.findings(facts(CatchAll(has_argument=False, held=0), vhost="a b"))
    assert found.level == "warning" and "no alternate exchange" in found.message
    assert found.fix is not None
    words = shlex.split(found.fix)
    assert words[:4] == ["rabbitmqctl", "set_policy", "-p", "a b"]
    assert words[-2:] == ["--apply-to", "exchanges"]
    assert words[-3] == '{"alternate-exchange":"rabbitq.delay.undeliverable"}'
    assert deliver_arguments() == {"alternate-exchange": UNDELIVERABLE}
    # set by policy already: nothing to say
    assert doctor_ladder.findings(facts(CatchAll(has_argument=False, held=0), policy=True)) == []


def test_the_app_s_messages_in_the_catch_all_are_a_warning_with_their_replay():
    held = CatchAll(has_argument=True, held=7, by_queue={"emails": 3, "emails.prio.2": 1})
    app = App(queue="emails", priorities=3)
    lanes = Facts(broker=facts_for(None), topology=app.topology(), handlers=app.handlers,
                  queues={}, consumer_timeout=None, delay_catch_all=held)  # fmt: skip
    [mine, others] = doctor_ladder.findings(lanes)
    assert mine.level == "warning"
    assert mine.message.startswith(
        f"{UNDELIVERABLE} holds 4 delayed message(s) of this app (emails: 3, emails.prio.2: 1)"
    )
    assert mine.fix is not None and f"rabbitq dlq replay {UNDELIVERABLE} --to emails" in mine.fix
    assert others.level == "info" and "holds 3 delayed message(s) of other queues" in others.message
    assert "not read" in others.message  # 3 held, none of them read


def test_other_apps_messages_in_the_catch_all_are_no_warning_of_this_app():
    held = CatchAll(has_argument=True, held=5, by_queue={"invoices": 4, "t.old.q": 1})
    [found] = doctor_ladder.findings(facts(held))
    assert found.level == "info" and "emails" not in found.message
    assert f"{UNDELIVERABLE} (shared by the vhost's apps) holds 5 delayed" in found.message
    assert "not read" not in found.message


def test_the_dlq_tools_take_the_catch_all_as_it_is_and_replay_to_rabbitq_delay_to():
    assert resolve_dlq(UNDELIVERABLE) == UNDELIVERABLE
    assert resolve_dlq("emails") == "emails.dlq"
    death = {"x-death": [{"queue": "rabbitq.delay.quorum.03", "reason": "expired"}]}
    assert origin_of({**death, DELAY_TO: "emails"}, UNDELIVERABLE) == "emails"
    assert origin_of(death, "emails.dlq") == "rabbitq.delay.quorum.03"
