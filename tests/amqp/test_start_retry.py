"""Which start failures are tried again (the broker, the network) and which are raised
at once (what a person must fix), and the retry loop's bounds, without a broker."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable

import aiormq.exceptions
import pytest

from rabbitq._amqp.start_retry import until_started, worth_retrying
from rabbitq.errors import BrokerUnavailable, ConfigurationError, TopologyMismatch


def caused(outer: BaseException, cause: BaseException) -> BaseException:
    outer.__cause__ = cause
    return outer


@pytest.mark.parametrize(
    "exc",
    [
        ConnectionRefusedError(111, "Connection refused"),
        TimeoutError(),
        aiormq.exceptions.ChannelInvalidStateError("<Channel: 1> closed"),
        aiormq.exceptions.ConnectionClosed(320, "CONNECTION_FORCED - broker forced close"),
        aiormq.exceptions.ChannelNotFoundEntity("NOT_FOUND - home node of queue is down"),
        caused(BrokerUnavailable("cannot reach RabbitMQ at amqp://x:***@h/"), OSError()),
        asyncio.CancelledError(),  # aiormq's own future (the caller's is told apart)
        RuntimeError('<Connection: "amqp://guest:******@127.0.0.1:5672/" at 0x7f> closed'),
    ],
    ids=["refused", "timeout", "channel-closed", "forced", "not-found", "unreachable", "cancel",
         "connection-closed"],  # fmt: skip
)
def test_the_broker_or_the_network_failing_is_tried_again(exc):
    assert worth_retrying(exc)


@pytest.mark.parametrize(
    "exc",
    [
        caused(BrokerUnavailable("refused the login"),
               aiormq.exceptions.ProbableAuthenticationError("ACCESS_REFUSED")),  # fmt: skip
        caused(BrokerUnavailable("TLS handshake failed"), ssl.SSLError(1, "bad")),
        caused(
            BrokerUnavailable("refused vhost 'nope'"),
            aiormq.exceptions.AMQPConnectionError(
                "Expected one of ['Connection.OpenOk'], got <Connection.Close reply_code=530 "
                "reply_text='NOT_ALLOWED - vhost nope not found'>"
            ),
        ),
        aiormq.exceptions.ChannelPreconditionFailed("PRECONDITION_FAILED - inequivalent arg"),
        aiormq.exceptions.ChannelAccessRefused("ACCESS_REFUSED - configure access"),
        TopologyMismatch("queue", "q", "x-queue-type", "quorum, not classic"),
        ConfigurationError("no such exchange type"),
        ValueError("invalid URL"),
        KeyError("a bug"),
        RuntimeError("another bug"),
    ],
    ids=["login", "tls", "vhost", "arguments", "permissions", "mismatch", "config", "url", "bug",
         "runtime-bug"],  # fmt: skip
)
def test_what_a_person_must_fix_is_raised_at_once(exc):
    assert not worth_retrying(exc)


def failing(times: int, error: BaseException) -> tuple[list[int], Callable[[], Awaitable[str]]]:
    calls: list[int] = []

    async def attempt() -> str:
        calls.append(1)
        if len(calls) <= times:
            raise error
        return "started"

    return calls, attempt


async def test_a_start_is_tried_again_until_it_succeeds_and_each_try_is_logged(caplog):
    calls, attempt = failing(3, ConnectionRefusedError(111, "Connection refused"))
    cleaned: list[int] = []

    async def clean_up() -> None:
        cleaned.append(1)

    result = await until_started(
        attempt, url="amqp://u:secret@h/", retry_every=0.01, clean_up=clean_up
    )
    assert result == "started" and len(calls) == 4 and len(cleaned) == 3
    tries = [r.getMessage() for r in caplog.records if "waiting for RabbitMQ" in r.getMessage()]
    assert len(tries) == 3 and all("amqp://u:***@h/" in t for t in tries)
    assert "secret" not in caplog.text


async def test_a_bounded_wait_ends_in_one_error_naming_it():
    calls, attempt = failing(1000, ConnectionRefusedError(111, "Connection refused"))
    with pytest.raises(BrokerUnavailable, match=r"\(waited 0.05s: --wait-for-broker\)$"):
        await until_started(attempt, url="amqp://h/", wait=0.05, retry_every=0.01)
    assert len(calls) > 1


async def test_no_wait_is_one_try_with_its_own_error():
    calls, attempt = failing(1000, ConnectionRefusedError(111, "Connection refused"))
    with pytest.raises(ConnectionRefusedError):
        await until_started(attempt, url="amqp://h/", wait=0, retry_every=0.01)
    assert len(calls) == 1


async def test_a_final_error_is_not_tried_again():
    calls, attempt = failing(1000, ValueError("bad URL"))
    with pytest.raises(ValueError):
        await until_started(attempt, url="amqp://h/", retry_every=0.01)
    assert len(calls) == 1


async def test_the_callers_cancellation_stops_the_waiting():
    calls, attempt = failing(10**9, ConnectionRefusedError(111, "Connection refused"))
    task = asyncio.create_task(until_started(attempt, url="amqp://h/", retry_every=0.01))
    while len(calls) < 3:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
