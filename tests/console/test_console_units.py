"""The console's pure parts: fingerprints and groups, rates, the chart, scopes, tokens."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from rabbitq._amqp import headers as h
from rabbitq.console.actions import ScopeError, Snapshots, operation_filters, select
from rabbitq.console.chart import sparkline
from rabbitq.console.fingerprint import (
    NO_ERROR,
    fingerprint,
    group_messages,
    normalise,
    reason_counts,
    split_error,
)
from rabbitq.console.history import History, Sample, counters_by_queue, rates
from rabbitq.console.security import Guard, same_origin, token_id
from rabbitq.console.state import read_counters
from rabbitq.console.views import filter_params, rate_text, split_list, x_death
from rabbitq.dlq import DeadMessage, Filters


def msg(i: int, error: str | None, reason: str = "exhausted", minute: int = 0) -> DeadMessage:
    headers = h.dead_letter_headers(
        {},
        reason=reason,
        error=error,
        traceback="Traceback ..." if i % 2 else None,
        queue="q",
        attempt=1,
        exchange="x",
        routing_key="t",
        failed_at=datetime(2024, 5, 1, 10, minute, tzinfo=UTC),
    )
    return DeadMessage(dlq="q.dlq", body=b"{}", properties={"message_id": f"m{i}"}, headers=headers)


@pytest.mark.parametrize(
    ("error", "label"),
    [
        ("ValueError: amount 12.50 too large", "ValueError: amount <n> too large"),
        ("KeyError: 'user 4711'", "KeyError: 'user <n>'"),
        (
            "LookupError: order 6f1c3a52-4a8e-4ab7-9d6e-2f5b8c1e9a10 missing",
            "LookupError: order <uuid> missing",
        ),
        ("RuntimeError: object at 0x7f3a2b1c", "RuntimeError: object at <hex>"),
        ("HashError: digest deadbeef12345678 bad", "HashError: digest <hex> bad"),
        ("SMTPError: 550 for a@example.com", "SMTPError: <n> for <email>"),
        ("TimeoutError: at 2024-05-01T10:00:00Z", "TimeoutError: at <time>"),
        ("gateway.Declined: card_12 refused", "gateway.Declined: card_<n> refused"),
        ("no colon here 42", "no colon here <n>"),
        (None, NO_ERROR),
    ],
)
def test_a_fingerprint_keeps_the_type_and_normalises_ids_and_numbers(error, label):
    assert fingerprint(error)[1] == label


def test_errors_that_differ_only_in_ids_share_a_fingerprint_and_others_do_not():
    a, _ = fingerprint("KeyError: 'user 1'")
    b, _ = fingerprint("KeyError: 'user 987654'")
    c, _ = fingerprint("ValueError: 'user 1'")
    assert a == b != c
    assert len(a) == 12


def test_split_error_takes_a_dotted_type_and_refuses_a_sentence():
    assert split_error("a.b.Error: x: y") == ("a.b.Error", "x: y")
    assert split_error("something went wrong: x") == ("", "something went wrong: x")
    assert split_error("") == ("", "")


def test_normalise_collapses_whitespace_and_bounds_the_length():
    assert normalise("a \n\t b") == "a b"
    assert len(normalise("x" * 1000)) == 200


def test_groups_are_by_reason_and_fingerprint_largest_first_with_times_and_a_sample():
    messages = [
        msg(0, "ValueError: n 1", minute=5),
        msg(1, "ValueError: n 2", minute=1),
        msg(2, "ValueError: n 3", minute=9),
        msg(3, "ValueError: n 4", reason="permanent"),
        msg(4, None, reason="invalid"),
    ]
    groups = group_messages(messages)
    assert [(g.reason, g.label, g.count) for g in groups] == [
        ("exhausted", "ValueError: n <n>", 3),
        ("invalid", NO_ERROR, 1),
        ("permanent", "ValueError: n <n>", 1),
    ]
    top = groups[0]
    assert top.first == datetime(2024, 5, 1, 10, 1, tzinfo=UTC)
    assert top.last == datetime(2024, 5, 1, 10, 9, tzinfo=UTC)
    assert top.sample is not None and top.sample.traceback  # the first one with a traceback
    assert top.keys == [m.key for m in messages[:3]]
    assert reason_counts(groups) == [("exhausted", 3), ("invalid", 1), ("permanent", 1)]


def test_rates_come_from_counters_when_a_worker_was_read_else_from_depths():
    a = Sample(at=100, depths={"q": 10}, consumers={"q": 1})
    b = Sample(at=110, depths={"q": 30}, consumers={"q": 1})
    assert rates([a], "q").source == "none"
    r = rates([a, b], "q")
    assert (r.source, r.net, r.incoming) == ("depths", 2.0, None)
    c = Sample(at=100, depths={"q": 10}, consumers={}, received={"q": 100}, processed={"q": 90})
    d = Sample(at=110, depths={"q": 10}, consumers={}, received={"q": 150}, processed={"q": 140})
    r = rates([c, d], "q")
    assert (r.source, r.incoming, r.outgoing, r.net) == ("metrics", 5.0, 5.0, 0.0)
    restarted = Sample(at=120, depths={"q": 10}, consumers={}, received={"q": 3}, processed={})
    assert rates([d, restarted], "q").incoming == 0.0  # a counter reset is not negative


def test_history_keeps_one_window_and_gives_a_queues_series():
    history = History(window=60)
    for t in range(0, 200, 10):
        history.add(Sample(at=t, depths={"q": t}, consumers={}))
    assert history.series("q")[0] == (130, 130)
    assert history.latest is not None and history.latest.at == 190
    assert history.series("other") == []


def test_worker_counters_are_summed_per_queue():
    text = (
        "# TYPE rabbitq_messages_received_total counter\n"
        'rabbitq_messages_received_total{queue="q",type="a"} 3\n'
        'rabbitq_messages_received_total{queue="q",type="b"} 4\n'
        "# TYPE rabbitq_messages_processed_total counter\n"
        'rabbitq_messages_processed_total{queue="q",type="a",outcome="success"} 5\n'
    )
    assert read_counters(text) == ({"q": 7.0}, {"q": 5.0})
    assert counters_by_queue([("x_total", {"queue": "q"}, 1.0)], "y_total") == {}


def test_the_chart_is_an_svg_of_numbers_only():
    svg = sparkline([(0, 0), (1800, 4), (3500, 2)], now=3600)
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert "max 4" in svg and "<path" in svg
    assert "no samples yet" in sparkline([], now=3600)
    assert "<path" not in sparkline([(0, 5)], now=10_000)  # older than the window


def test_a_scope_names_only_keys_of_the_drawn_page():
    snaps = Snapshots()
    snap = snaps.add(
        "q.dlq", Filters(reasons=frozenset({"permanent"})), ["a", "b", "c"], {"g1": ("a", "c")}
    )
    assert snaps.get(snap.id) is snap and snaps.get("nope") is None
    assert select(snap, "filter")[0] == ("a", "b", "c")
    assert "reason permanent" in select(snap, "filter")[1]
    assert select(snap, "group", group="g1")[0] == ("a", "c")
    assert select(snap, "selection", chosen=["c", "zz", "a"])[0] == ("a", "c")
    for scope, kwargs in (("group", {"group": "g9"}), ("selection", {}), ("all", {})):
        with pytest.raises(ScopeError):
            select(snap, scope, **kwargs)
    f = operation_filters(snap, ["a"])
    assert f.keys == frozenset({"a"}) and f.reasons == frozenset({"permanent"})


def test_the_guard_opens_sessions_only_for_the_token_and_checks_csrf():
    guard = Guard(token="s3cret")
    assert guard.sign_in("wrong") is None
    session = guard.sign_in("s3cret")
    assert session is not None and "s3cret" not in session
    assert guard.who(session) == token_id("s3cret") and token_id("s3cret").startswith("tok-")
    assert guard.check_csrf(session, guard.csrf(session))
    assert not guard.check_csrf(session, "0" * 64)
    assert not guard.check_csrf("other", guard.csrf("other"))  # not signed in
    guard.sign_out(session)
    assert guard.who(session) is None


def test_same_origin_accepts_no_origin_and_the_host_only():
    assert same_origin(None, "127.0.0.1:8080")
    assert same_origin("http://127.0.0.1:8080", "127.0.0.1:8080")
    assert not same_origin("http://evil.example", "127.0.0.1:8080")
    assert not same_origin("null", "127.0.0.1:8080")


def test_view_helpers():
    assert filter_params({"type": " a ", "grep": "", "other": "x"}) == {"type": "a"}
    assert rate_text(None) == "-" and rate_text(2.0) == "2.0/s" and rate_text(0.01) == "0.6/min"
    assert x_death({"x-death": [{"reason": b"expired", "count": 1}]}) == [
        {"reason": "bytes 'expired'", "count": "1"}
    ]
    assert x_death({}) == []
    assert split_list(" a, ,b ") == ["a", "b"] and split_list(None) == []


def test_the_overview_lists_the_blocked_keys_registry_of_an_app_that_blocks_keys():
    # docs/ordering.md, "Blocked keys": the console's overview shows <queue>.blocked, one
    # message per blocked key, beside the app's retry queues and DLQ.
    from rabbitq import App, Context, Message
    from rabbitq.console.targets import from_app

    class Entry(Message, type="console.ledger.entry"):
        account: str

    app = App(queue="ledger")

    @app.handler(Entry, ordered_by=lambda m: m.account, on_dead="block")
    async def apply(msg: Entry, ctx: Context) -> None: ...

    plain = App(queue="mail")

    @plain.handler(Entry, ordered_by=lambda m: m.account)
    async def send(msg: Entry, ctx: Context) -> None: ...

    assert ("ledger.blocked", "blocked") in from_app("svc:app", app).queues
    assert all(kind != "blocked" for _, kind in from_app("svc:plain", plain).queues)
