"""The sync publisher's machinery without a broker: one loop thread and one publisher
shared by threads, opened once and again after a failed open, the closed and in-loop
errors, close() waiting for calls in progress, and a forked child starting afresh.

The async publisher is replaced by a fake with the same ``open``/``close`` and its own
coroutine methods, called through ``SyncPublisher._call`` (what ``publish`` and
``publish_many`` are one line over); the real ones: tests/integration/amqp/.
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import threading
import time
import warnings
from typing import Any

import pytest

from rabbitq import (
    App,
    BrokerUnavailable,
    ConfigurationError,
    PublishError,
    PublishInterrupted,
    SyncPublisher,
    Unroutable,
)


class Fake:
    """An async publisher's shape: counts its opens and closes, answers calls."""

    def __init__(self, log: dict[str, Any]) -> None:
        self.log = log

    async def open(self) -> None:
        self.log["opens"] += 1
        gate = self.log.get("gate")
        if gate is not None:  # a threading.Event the test sets
            await asyncio.to_thread(gate.wait)
        if self.log["fail_opens"] > 0:
            self.log["fail_opens"] -= 1
            raise BrokerUnavailable("the broker cannot be reached (fake)")

    async def close(self) -> None:
        self.log["closes"] += 1

    async def send(self, n: int, *, tag: str = "") -> tuple[int, str, int, str]:
        await asyncio.sleep(0)
        return n, tag, id(self), threading.current_thread().name

    async def slow(self, gate: threading.Event) -> str:
        await asyncio.to_thread(gate.wait)
        return "finished"

    async def fail(self, error: Exception, gate: threading.Event | None = None) -> None:
        if gate is not None:
            await asyncio.to_thread(gate.wait)
        raise error

    async def whoami(self) -> tuple[int, int]:
        # The thread object, not its ident: a child's new thread may reuse the ident.
        return os.getpid(), id(threading.current_thread())

    async def close_me(self, pub: SyncPublisher) -> None:
        pub.close()


def fake_publisher(fail_opens: int = 0) -> tuple[SyncPublisher, dict[str, Any]]:
    log: dict[str, Any] = {"opens": 0, "closes": 0, "fail_opens": fail_opens, "made": 0}

    def make() -> Any:
        log["made"] += 1
        return Fake(log)

    return SyncPublisher(make), log


def app() -> App:
    return App(queue="unit-sync-publisher")


def test_a_closed_sync_publisher_refuses_with_one_line_saying_nothing_was_sent():
    pub = app().sync_publisher()
    pub.close()
    pub.close()  # idempotent
    with pytest.raises(PublishInterrupted) as info:
        pub.publish_many([])
    assert isinstance(info.value, PublishError)  # caught where a failed publish is
    text = str(info.value)
    assert "\n" not in text and text.startswith("nothing was sent: this sync publisher is closed")
    assert "app.sync_publisher()" in text
    assert pub.closed and pub._thread is None  # it never started anything


def test_the_end_of_its_with_block_closes_it():
    with app().sync_publisher() as pub:
        assert not pub.closed
    assert pub.closed
    with pytest.raises(PublishInterrupted, match="closed"):
        pub.publish_many([])


def test_a_call_from_a_thread_running_an_event_loop_is_refused_pointing_to_the_async_one():
    pub = app().sync_publisher()

    async def inside() -> None:
        pub.publish_many([])

    with pytest.raises(ConfigurationError) as info:
        asyncio.run(inside())
    text = str(info.value)
    assert "\n" not in text and "SyncPublisher.publish_many() blocks" in text
    assert "async with app.publisher() as pub" in text and "await pub.publish_many(" in text
    assert pub._thread is None  # refused before anything started
    pub.close()


def test_bad_options_are_refused_when_it_is_made_not_at_the_first_publish():
    with pytest.raises(ConfigurationError, match="timeout must be positive"):
        app().sync_publisher(timeout=0)
    with pytest.raises(ConfigurationError, match="retry_for must be positive"):
        app().sync_publisher(retry_for=-1)


def test_eight_threads_share_one_publisher_opened_once_on_one_loop_thread():
    pub, log = fake_publisher()
    results: list[tuple[int, str, int, str]] = []
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            for i in range(250):
                results.append(pub._call(Fake.send, k * 1000 + i, tag=f"t{k}"))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert len(results) == 2000
    assert len({n for n, *_ in results}) == 2000  # every call answered once
    assert all(tag == f"t{n // 1000}" for n, tag, *_ in results)  # its own keywords
    assert len({fake for *_, fake, _ in results}) == 1  # one publisher
    assert {thread for *_, thread in results} == {"rabbitq sync publisher"}
    assert log["opens"] == 1
    pub.close()
    assert log["closes"] == 1
    assert not pub._thread.is_alive()


def test_a_failed_open_raises_to_its_caller_and_the_next_call_opens_again():
    pub, log = fake_publisher(fail_opens=1)
    with pytest.raises(BrokerUnavailable, match="cannot be reached"):
        pub._call(Fake.send, 1)
    assert (log["opens"], log["closes"]) == (1, 1)  # what the failed open got to: closed
    assert pub._call(Fake.send, 2)[0] == 2
    assert log["opens"] == 2
    pub.close()
    assert log["closes"] == 2


def test_calls_that_arrive_while_it_opens_share_that_one_attempt():
    pub, log = fake_publisher(fail_opens=1)
    log["gate"] = gate = threading.Event()
    outcomes: list[object] = []

    def call() -> None:
        try:
            outcomes.append(pub._call(Fake.send, 1))
        except BrokerUnavailable as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=call) for _ in range(4)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while len(pub._calls) < 4 and time.monotonic() < deadline:  # all four wait on it
        time.sleep(0.01)
    gate.set()
    for t in threads:
        t.join(30)
    assert len(outcomes) == 4 and all(isinstance(o, BrokerUnavailable) for o in outcomes)
    assert log["opens"] == 1  # one attempt for the four, not four in a row
    del log["gate"]
    assert pub._call(Fake.send, 2)[0] == 2
    pub.close()


def test_an_interrupted_call_retires_the_publisher_the_next_call_opens_a_new_one():
    pub, log = fake_publisher()
    first = pub._call(Fake.send, 1)[2]
    gate = threading.Event()
    late: list[BaseException] = []

    def in_progress() -> None:  # on the first publisher while it is retired
        try:
            pub._call(Fake.fail, Unroutable("no queue"), gate)
        except Unroutable as exc:
            late.append(exc)

    other = threading.Thread(target=in_progress)
    other.start()
    deadline = time.monotonic() + 30
    while not pub._calls and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(PublishInterrupted, match="dropped"):
        pub._call(Fake.fail, PublishInterrupted("the connection dropped"))
    second = pub._call(Fake.send, 2)[2]
    assert second != first and (log["made"], log["opens"]) == (3, 2)
    assert log["closes"] == 0  # the first still has a call in progress
    gate.set()
    other.join(30)
    assert len(late) == 1
    deadline = time.monotonic() + 30
    while log["closes"] < 1 and time.monotonic() < deadline:  # closed after its last call
        time.sleep(0.01)
    assert log["closes"] == 1
    # A refusal that is the message's, not the connection's, keeps the publisher.
    with pytest.raises(Unroutable):
        pub._call(Fake.fail, Unroutable("no queue"))
    assert pub._call(Fake.send, 3)[2] == second and log["opens"] == 2
    pub.close()
    assert log["closes"] == 2


def test_close_waits_for_the_calls_in_progress_and_then_refuses_new_ones():
    pub, log = fake_publisher()
    gate = threading.Event()
    got: list[str] = []
    caller = threading.Thread(target=lambda: got.append(pub._call(Fake.slow, gate)))
    caller.start()
    deadline = time.monotonic() + 30
    while not pub._calls and time.monotonic() < deadline:
        time.sleep(0.01)
    closer = threading.Thread(target=pub.close)
    closer.start()
    deadline = time.monotonic() + 30
    while not pub.closed and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(PublishInterrupted, match="closed"):
        pub._call(Fake.send, 1)
    second = threading.Thread(target=pub.close)
    second.start()
    time.sleep(0.2)
    assert closer.is_alive() and log["closes"] == 0  # still waiting for the slow call
    assert second.is_alive()  # a second close() waits for the first one too
    gate.set()
    closer.join(30)
    second.join(30)
    assert not second.is_alive() and not pub._thread.is_alive()
    caller.join(30)
    assert got == ["finished"]  # finished, not cancelled
    assert log["closes"] == 1


def test_a_publisher_dropped_without_close_ends_its_thread_and_closes_its_connection():
    """The misuse of one sync publisher per request must not leave a thread and a
    connection behind each time."""
    pub, log = fake_publisher()
    pub._call(Fake.send, 1)
    thread = pub._thread
    del pub
    gc.collect()
    thread.join(30)
    assert not thread.is_alive()
    assert (log["opens"], log["closes"]) == (1, 1)


def test_close_from_the_publishers_own_thread_is_refused_not_a_deadlock():
    pub, _ = fake_publisher()
    with pytest.raises(ConfigurationError, match="SyncPublisher.close"):
        pub._call(Fake.close_me, pub)
    assert not pub.closed
    pub.close()


def test_a_forked_child_starts_its_own_thread_and_publisher_and_leaves_the_parents():
    pub, log = fake_publisher()
    parent_pid, parent_loop_thread = pub._call(Fake.whoami)
    assert parent_pid == os.getpid()
    read, write = os.pipe()
    with warnings.catch_warnings():  # Python 3.12+ warns on a fork beside threads
        warnings.simplefilter("ignore", DeprecationWarning)
        child = os.fork()
    if child == 0:  # the child: report, then leave without running any cleanup
        code = 1
        signal.alarm(60)  # a child that hangs (the old thread's loop waited on) dies
        try:
            pid, loop_thread = pub._call(Fake.whoami)
            ok = pid == os.getpid() and loop_thread != parent_loop_thread
            ok = ok and log["opens"] == 2 and log["made"] == 3  # its own, opened here
            pub.close()
            os.write(write, b"ok" if ok else f"{pid} {loop_thread} {log}".encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as answer:
        said = answer.read().decode()
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0 and said == "ok", said
    # The parent's thread and publisher were not touched by the child.
    assert pub._call(Fake.whoami) == (parent_pid, parent_loop_thread)
    assert (log["opens"], log["closes"]) == (1, 0)
    pub.close()
    assert log["closes"] == 1
