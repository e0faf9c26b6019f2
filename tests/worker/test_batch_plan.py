"""The pure decisions of a batch: repeats of a key, and what a handler's answer names."""

from __future__ import annotations

import pytest

from rabbitq import BatchResult, ConfigurationError, Message, PermanentError
from rabbitq._worker.batch_plan import failures_of, first_of_each_key


class Note(Message, type="test.batch_plan.note"):
    n: int


def test_the_first_message_of_each_key_stays_and_later_ones_point_at_it():
    keep, repeats = first_of_each_key(["a", "b", "a", "c", "b", "a"])
    assert keep == [0, 1, 3]
    assert repeats == {2: 0, 4: 1, 5: 0}


def test_no_answer_names_no_failure():
    assert failures_of(None, [Note(n=1)], "h") == {}


def test_failures_are_named_by_index_or_by_the_message_itself():
    msgs = [Note(n=1), Note(n=1), Note(n=2)]  # equal messages, told apart by identity
    boom = RuntimeError("x")
    result = BatchResult().fail(0, boom).dead_letter(msgs[1])
    failed = failures_of(result, msgs, "h")
    assert failed[0] is boom
    assert isinstance(failed[1], PermanentError) and set(failed) == {0, 1}


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        (BatchResult().retry(3), "named message 3, but its batch has 2 (indices 0 to 1)"),
        (BatchResult().retry(-1), "named message -1"),
        (BatchResult().retry(Note(n=9)), "named a message that is not in its batch"),
        (BatchResult().retry(1).dead_letter(1), "named message 1 of its batch twice"),
        (["ok", "ok"], "returned list: return None (all succeeded) or a rabbitq.BatchResult"),
    ],
)
def test_an_answer_that_does_not_fit_the_batch_is_a_clear_error(answer, says):
    with pytest.raises(ConfigurationError, match="batch handler send") as info:
        failures_of(answer, [Note(n=1), Note(n=2)], "send")
    assert says in str(info.value)


def test_a_batch_result_takes_only_indices_or_messages_and_exceptions():
    with pytest.raises(ConfigurationError, match="index or the message itself"):
        BatchResult().retry(True)  # a bool is not an index
    with pytest.raises(ConfigurationError, match="takes an exception"):
        BatchResult().fail(0, "oops")  # type: ignore[arg-type]
