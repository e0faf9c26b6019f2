"""rabbitq's own headers: bounded error texts and the headers of retry and DLQ copies."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from rabbitq._amqp import headers as h


def raise_and_catch(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:
        return caught


def test_header_names_carry_no_x_prefix():
    names = [
        h.ATTEMPT,
        h.REASON,
        h.ERROR,
        h.TRACEBACK,
        h.FAILED_AT,
        h.QUEUE,
        h.ORIGINAL_EXCHANGE,
        h.ORIGINAL_ROUTING_KEY,
        h.REPLAYED,
    ]
    assert names == [
        "rabbitq-attempt",
        "rabbitq-reason",
        "rabbitq-error",
        "rabbitq-traceback",
        "rabbitq-failed-at",
        "rabbitq-queue",
        "rabbitq-original-exchange",
        "rabbitq-original-routing-key",
        "rabbitq-replayed",
    ]


def test_a_short_text_is_not_truncated():
    assert h.truncate_utf8("short", 1024) == "short"
    assert h.truncate_utf8("x" * 1024, 1024) == "x" * 1024


def test_a_long_text_keeps_its_head_and_is_marked():
    text = h.truncate_utf8("a" * 2000, 1024)
    assert len(text.encode()) <= 1024
    assert text.startswith("aaa")
    assert text.endswith("…")


def test_a_long_text_can_keep_its_tail():
    text = h.truncate_utf8("head" + "a" * 9000 + "THE END", 8192, keep="tail")
    assert len(text.encode()) <= 8192
    assert text.startswith("…")
    assert text.endswith("THE END")


@pytest.mark.parametrize("char", ["é", "€", "日", "🐇"])
@pytest.mark.parametrize("keep", ["head", "tail"])
def test_truncation_counts_utf8_bytes_and_never_splits_a_character(char, keep):
    text = h.truncate_utf8("x" + char * 3000, 1024, keep=keep)
    raw = text.encode("utf-8")  # raises if a character was split into a surrogate
    assert len(raw) <= 1024
    body = text.strip("…x")
    assert body and set(body) == {char}
    assert len(raw) > 1024 - 3 - len(char.encode())  # nothing more was dropped than needed


def test_a_text_with_a_lone_surrogate_can_always_be_encoded():
    # str(exc) of an OSError about a file whose name is not UTF-8 (os.fsdecode).
    text = h.truncate_utf8("No such file: '/tmp/\udcff'", 1024)
    assert text.encode("utf-8")
    assert text.startswith("No such file")


def test_format_error_is_type_and_message():
    assert h.format_error(ValueError("bad amount")) == "ValueError: bad amount"
    assert h.format_error(KeyError("k")) == "KeyError: 'k'"
    assert h.format_error(TimeoutError()) == "TimeoutError"


def test_format_error_is_at_most_one_kibibyte():
    error = h.format_error(RuntimeError("é" * 5000))
    assert error.startswith("RuntimeError: é")
    assert len(error.encode()) <= h.MAX_ERROR_BYTES == 1024


def test_format_error_of_an_undecodable_file_name_is_encodable():
    error = h.format_error(FileNotFoundError(2, "No such file", "/tmp/\udcff.csv"))
    assert error.encode("utf-8").startswith(b"FileNotFoundError: [Errno 2]")


def test_format_traceback_ends_where_it_failed_and_is_at_most_eight_kibibytes():
    cause = raise_and_catch(LookupError("é" * 6000))
    try:
        raise RuntimeError("at the bottom") from cause
    except RuntimeError as exc:
        text = h.format_traceback(exc)
    assert len(text.encode()) <= h.MAX_TRACEBACK_BYTES == 8192
    assert text.rstrip().endswith("RuntimeError: at the bottom")
    assert "LookupError: éé" in text and "…" in text  # the huge message was cut


def test_format_traceback_keeps_the_frames_when_the_error_message_is_huge():
    text = h.format_traceback(raise_and_catch(ValueError("x" * 20_000)))
    assert len(text.encode()) <= h.MAX_TRACEBACK_BYTES
    assert text.startswith("Traceback (most recent call last):")
    assert "raise_and_catch" in text


def test_format_traceback_of_a_very_deep_failure_keeps_its_end():
    def recurse(n: int) -> None:
        if n == 0:
            raise KeyError("deep")
        recurse(n - 1)

    try:
        recurse(300)
    except KeyError as exc:
        text = h.format_traceback(exc)
    assert len(text.encode()) <= h.MAX_TRACEBACK_BYTES
    assert text.rstrip().endswith("KeyError: 'deep'")


def test_format_traceback_of_a_short_failure_is_complete():
    text = h.format_traceback(raise_and_catch(ValueError("nope")))
    assert text.startswith("Traceback (most recent call last):")
    assert "raise_and_catch" in text
    assert text.rstrip().endswith("ValueError: nope")


@pytest.mark.parametrize(
    ("value", "text"),
    [("emails", "emails"), (b"emails", "emails"), (b"\xff", "\ufffd"), (3, "3"), (None, None)],
)
def test_text_header_reads_any_producers_value_as_text(value, text):
    assert h.text_header({"k": value}, "k") == text


def test_text_header_of_a_missing_header_is_none():
    assert h.text_header({}, "k") is None


def test_retry_headers_keep_the_originals_and_add_attempt_error_and_origin():
    original = {"tenant": "acme", "x-death": [{"queue": "q.retry.1s", "reason": "expired"}]}
    out = h.retry_headers(
        original,
        next_attempt=2,
        error="RuntimeError: down",
        exchange="rabbitq",
        routing_key="email.send",
    )
    assert out == {
        "tenant": "acme",
        "rabbitq-deaths": [{"queue": "q.retry.1s", "reason": "expired", "count": 1}],
        "rabbitq-original-exchange": "rabbitq",
        "rabbitq-original-routing-key": "email.send",
        "rabbitq-attempt": 2,
        "rabbitq-error": "RuntimeError: down",
    }
    assert original == {"tenant": "acme", "x-death": [{"queue": "q.retry.1s", "reason": "expired"}]}


def test_a_retry_copy_keeps_the_origin_of_an_earlier_copy():
    # Back from the retry queue: delivered via the default exchange with the queue's name.
    earlier = {
        "rabbitq-attempt": 2,
        "rabbitq-error": "RuntimeError: first",
        "rabbitq-original-exchange": "rabbitq",
        "rabbitq-original-routing-key": "email.send",
    }
    out = h.retry_headers(
        earlier, next_attempt=3, error="RuntimeError: second", exchange="", routing_key="emails"
    )
    assert out["rabbitq-original-exchange"] == "rabbitq"
    assert out["rabbitq-original-routing-key"] == "email.send"
    assert out["rabbitq-attempt"] == 3
    assert out["rabbitq-error"] == "RuntimeError: second"


def test_an_origin_written_as_bytes_by_another_client_is_read_as_text():
    earlier = {"rabbitq-original-exchange": b"rabbitq", "rabbitq-original-routing-key": b"a.b"}
    assert h.origin(earlier, "", "emails") == {
        "rabbitq-original-exchange": "rabbitq",
        "rabbitq-original-routing-key": "a.b",
    }


def test_the_brokers_per_delivery_count_is_not_carried_to_a_copy():
    original = {"x-delivery-count": 3, "tenant": "acme"}
    retry = h.retry_headers(original, next_attempt=2, error="e", exchange="x", routing_key="k")
    dead = h.dead_letter_headers(
        original,
        reason="exhausted",
        error="e",
        traceback=None,
        queue="q",
        attempt=5,
        exchange="x",
        routing_key="k",
    )
    assert "x-delivery-count" not in retry
    assert "x-delivery-count" not in dead
    assert retry["tenant"] == dead["tenant"] == "acme"


def test_dead_letter_headers_say_why_where_and_when():
    failed_at = datetime(2024, 5, 17, 9, 30, 15, 123456, tzinfo=UTC)
    out = h.dead_letter_headers(
        {"tenant": "acme", "rabbitq-attempt": 5},
        reason="exhausted",
        error="RuntimeError: down",
        traceback="Traceback ...",
        queue="emails",
        attempt=5,
        exchange="rabbitq",
        routing_key="email.send",
        failed_at=failed_at,
    )
    assert out == {
        "tenant": "acme",
        "rabbitq-attempt": 5,
        "rabbitq-reason": "exhausted",
        "rabbitq-error": "RuntimeError: down",
        "rabbitq-traceback": "Traceback ...",
        "rabbitq-failed-at": "2024-05-17T09:30:15.123+00:00",
        "rabbitq-queue": "emails",
        "rabbitq-original-exchange": "rabbitq",
        "rabbitq-original-routing-key": "email.send",
    }


def test_dead_letter_headers_without_a_traceback_have_none():
    out = h.dead_letter_headers(
        {},
        reason="invalid",
        error="DecodeError: body is not JSON",
        traceback=None,
        queue="emails",
        attempt=1,
        exchange="rabbitq",
        routing_key="email.send",
    )
    assert "rabbitq-traceback" not in out
    failed_at = datetime.fromisoformat(out["rabbitq-failed-at"])
    assert failed_at.utcoffset() is not None
    assert abs((datetime.now(UTC) - failed_at).total_seconds()) < 60


def test_dead_letter_headers_replace_an_earlier_dlq_copys_reason():
    replayed = {
        "rabbitq-reason": "permanent",
        "rabbitq-queue": "old",
        "rabbitq-replayed": 1,
        "rabbitq-original-exchange": "rabbitq",
        "rabbitq-original-routing-key": "email.send",
    }
    out = h.dead_letter_headers(
        replayed,
        reason="exhausted",
        error="e",
        traceback=None,
        queue="emails",
        attempt=5,
        exchange="",
        routing_key="emails",
    )
    assert out["rabbitq-reason"] == "exhausted"
    assert out["rabbitq-queue"] == "emails"
    assert out["rabbitq-replayed"] == 1
    assert out["rabbitq-original-routing-key"] == "email.send"


def test_dlq_only_headers_are_the_ones_a_replay_removes():
    assert set(h.DLQ_ONLY) == {
        "rabbitq-reason",
        "rabbitq-traceback",
        "rabbitq-failed-at",
        "rabbitq-queue",
    }


def test_the_brokers_x_death_is_read_in_one_place_raw_for_showing_and_validated_for_copies():
    when = datetime(2026, 11, 25, tzinfo=UTC)
    first = {"queue": "q", "reason": "expired", "time": when}
    headers = {"x-death": [first, "garbage", {"queue": "q.retry.1s", "reason": "expired"}]}
    assert h.last_death(headers) == first
    assert h.broker_deaths(headers) == [first, {"queue": "q.retry.1s", "reason": "expired"}]
    assert h.last_death({"x-death": ["garbage", first]}) is None  # the newest is unreadable
    assert h.last_death({}) is None and h.broker_deaths({"x-death": "x"}) == []
    assert [d["queue"] for d in h.deaths(headers)] == ["q", "q.retry.1s"]
