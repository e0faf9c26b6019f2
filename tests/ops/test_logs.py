"""The CLI's log set-up (rabbitq._ops.logs): the libraries' own level apart from
rabbitq's, and the secret scrubbed from a line's traceback as from its text."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator

import pytest

from rabbitq._ops import logs
from rabbitq._worker.consumer_timeout import ONCE


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    levels = {name: logging.getLogger(name).level for name in logs.LIBRARIES}
    yield
    root.handlers[:], level = saved
    root.setLevel(level)
    for name, value in levels.items():
        logging.getLogger(name).setLevel(value)


def test_debug_is_rabbitqs_own_and_the_libraries_are_off_unless_asked():
    logs.configure(level="debug")
    assert logging.getLogger("rabbitq.worker").isEnabledFor(logging.DEBUG)
    for name in logs.LIBRARIES:
        assert not logging.getLogger(f"{name}.channel").isEnabledFor(logging.ERROR)
    logs.configure(level="info", libraries="debug")
    assert not logging.getLogger("rabbitq.worker").isEnabledFor(logging.DEBUG)
    assert logging.getLogger("aio_pika.queue").isEnabledFor(logging.DEBUG)


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_the_secret_is_scrubbed_from_a_lines_traceback(capsys, as_json):
    logs.configure(json=as_json, secrets=["s3cr3t-password"])
    try:
        raise RuntimeError("cannot reach amqp://app:s3cr3t-password@host/")
    except RuntimeError as exc:
        logging.getLogger("rabbitq.worker").info("failed: %s", exc, exc_info=exc)
    err = capsys.readouterr().err
    assert "s3cr3t-password" not in err
    trace = json.loads(err)["exc_info"] if as_json else err
    assert "Traceback (most recent call last)" in trace and "app:***@host" in trace


def test_a_line_said_once_per_run_passes_in_its_first_process_only() -> None:
    told = threading.Event()  # a multiprocessing Event in the reloader: the same calls
    first, later = logs.FirstProcessOnly(told), logs.FirstProcessOnly(told)

    def record(once: bool) -> logging.LogRecord:
        made = logging.LogRecord("rabbitq.worker", logging.INFO, "", 0, "x", None, None)
        if once:
            setattr(made, ONCE, True)
        return made

    assert first.filter(record(True)) and first.filter(record(True))  # lanes of one run
    assert not later.filter(record(True))  # the worker --reload started next
    assert later.filter(record(False)) and first.filter(record(False))
