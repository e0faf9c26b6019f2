"""The wire encoding of workflows, their bounds and ids (no broker)."""

from __future__ import annotations

import pytest

from rabbitq import App, ConfigurationError, Context, Message, chain, chord, group
from rabbitq._amqp import headers as h
from rabbitq.testing import deliver
from rabbitq.workflow import wire


class Step(Message, type="test.wf.step"):
    n: int
    note: str = ""


class Done(Message, type="test.wf.done"):
    total: int


def test_a_chain_carries_the_rest_of_its_steps_and_round_trips():
    rest = [wire.step_of(Step(n=2)), wire.step_of(Step(n=3, note="é"))]
    text = wire.encode_chain(rest)
    assert wire.chain_of({wire.CHAIN: text}) == rest
    assert wire.chain_of({wire.CHAIN: text.encode()}) == rest  # as aiormq may give it
    assert wire.chain_of({}) is None


def test_a_step_is_published_as_given_whatever_model_this_process_knows():
    m = wire.message_of(("other.service.type", {"a": [1, {"b": "c"}]}))
    assert m.type_name() == "other.service.type"
    assert m.model_dump(mode="json") == {"a": [1, {"b": "c"}]}


def test_a_chord_member_knows_its_place_the_count_and_what_to_send():
    then, fail = wire.step_of(Done(total=3)), wire.step_of(Step(n=0))
    text = wire.encode_chord(1, 3, then, fail)
    m = wire.chord_of({wire.CHORD: text}, "g1")
    assert m == wire.Member("g1", 1, 3, then, fail)
    assert wire.chord_of({wire.CHORD: text}, None) is None


def test_ids_are_derived_so_a_second_publish_sends_the_same_ones():
    c = chord([Step(n=1), Step(n=2)], then=Done(total=2))
    assert len({wire.member_id(c.id, 0), wire.member_id(c.id, 1), wire.callback_id(c.id)}) == 3
    assert wire.member_id(c.id, 0) == wire.member_id(c.id, 0)
    assert wire.callback_id(c.id, wire.THEN) != wire.callback_id(c.id, wire.FAILURE)
    assert chord([Step(n=1)], then=Done(total=1), id="pay-42").id == "pay-42"


def test_too_large_a_workflow_is_a_one_line_error_at_once():
    big = "x" * wire.MAX_HEADER_BYTES
    with pytest.raises(ConfigurationError, match="above the 32768-byte bound") as e:
        chain(Step(n=1), Step(n=2, note=big))
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigurationError, match="32768-byte"):
        chord([Step(n=1)], then=Done(total=1), on_failure=Step(n=0, note=big))
    with pytest.raises(ConfigurationError, match="at most 1000 members"):
        chord([Step(n=i) for i in range(1001)], then=Done(total=1))
    with pytest.raises(ConfigurationError, match="at least one member"):
        group([])
    with pytest.raises(ConfigurationError, match="Message instances"):
        group([{"n": 1}])  # type: ignore[list-item]


def test_a_result_is_json_and_bounded():
    assert wire.encode_result(None) is None
    assert wire.encode_result(Done(total=2)) == b'{"total":2}'
    assert wire.encode_result({"a": [1]}) == b'{"a":[1]}'
    from rabbitq import PermanentError

    with pytest.raises(PermanentError, match="16384-byte bound"):
        wire.encode_result("x" * wire.MAX_RESULT_BYTES)
    with pytest.raises(PermanentError, match="not a pydantic model or a JSON value"):
        wire.encode_result(object())


async def test_a_chain_step_that_succeeds_queues_the_next_step_as_a_follow_up():
    app = App(queue="t.wf.unit")

    @app.handler(Step)
    async def step(msg: Step, ctx: Context) -> None:
        if msg.note == "fail":
            raise OSError("down")

    rest = [wire.step_of(Step(n=2)), wire.step_of(Step(n=3))]
    headers = {h.GROUP: "c1", wire.CHAIN: wire.encode_chain(rest)}
    result = await deliver(app, Step(n=1), headers=headers, message_id="m1")
    assert result.acked
    [nxt] = result.published
    assert nxt.message.model_dump(mode="json") == {"n": 2, "note": ""}
    assert nxt.type_name == "test.wf.step"
    assert nxt.headers[h.GROUP] == "c1"
    assert wire.chain_of(nxt.headers) == rest[1:]
    again = await deliver(app, Step(n=1), headers=headers, message_id="m1")
    assert again.published[0].message_id == nxt.message_id  # handled twice: the same id
    failed = await deliver(app, Step(n=1, note="fail"), headers=headers)
    assert failed.retried and failed.published == ()  # no next step for a failure
    last = await deliver(app, Step(n=3), headers={h.GROUP: "c1"})
    assert last.acked and last.published == ()


async def test_a_chord_member_without_a_status_store_is_dead_lettered_with_why():
    app = App(queue="t.wf.unit2")

    @app.handler(Step)
    async def step(msg: Step) -> None:
        pass

    headers = {h.GROUP: "g", wire.CHORD: wire.encode_chord(0, 2, wire.step_of(Done(total=2)), None)}
    result = await deliver(app, Step(n=1), headers=headers)
    assert result.dead_lettered and "App(status=...)" in (result.error or "")


def test_a_replayed_copy_keeps_the_workflow_headers():
    from rabbitq._amqp.copy import replay_headers

    chord_header = wire.encode_chord(0, 2, wire.step_of(Done(total=2)), None)
    dead = {
        h.GROUP: "g",
        wire.CHAIN: wire.encode_chain([wire.step_of(Step(n=2))]),
        wire.CHORD: chord_header,
        h.REASON: "exhausted",
        h.ATTEMPT: 3,
    }
    copy = replay_headers(dead)
    assert copy[h.GROUP] == "g" and copy[wire.CHORD] == chord_header
    assert wire.chain_of(copy) == [wire.step_of(Step(n=2))]
    assert h.REASON not in copy and h.ATTEMPT not in copy


async def test_without_a_status_store_a_result_is_ignored_whatever_it_is():
    app = App(queue="t.wf.unit3")

    @app.handler(Step)
    async def step(msg: Step) -> object:
        return object()  # not JSON: would be refused if it were kept

    headers = {h.GROUP: "c", wire.CHAIN: wire.encode_chain([wire.step_of(Step(n=2))])}
    assert (await deliver(app, Step(n=1), headers=headers)).acked
    assert (await deliver(app, Step(n=1))).acked


def test_a_workflow_shape_tells_two_workflows_under_one_id_apart():
    a, b = ("t.capture", {"item": 1}), ("t.capture", {"item": 2})
    then, fail = ("t.receipt", {"order": "o"}), ("t.alert", {"order": "o"})
    three = wire.shape("chord", [a, b, a], then, fail)
    assert wire.same_shape(three, wire.shape("chord", [a, b, a], then, fail))
    assert three.endswith(" chord of 3 members, then t.receipt, on_failure t.alert")
    others = [
        wire.shape("chord", [a, b, a, b, a], then, fail),  # more members
        wire.shape("chord", [a, b, b], then, fail),  # another body
        wire.shape("chord", [a, b, a], ("t.other", {}), fail),  # another callback
        wire.shape("chord", [a, b, a], then, None),
        wire.shape("group", [a, b, a], None, None),
    ]
    assert not any(wire.same_shape(three, other) for other in others)
    assert wire.shape("chain", [a], None, None).endswith(" chain of 1 member")
