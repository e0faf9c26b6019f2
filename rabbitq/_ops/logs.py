"""Log set-up for the CLI: readable lines by default, one JSON object per line with
``--log-json``; either way a secret (the broker password) is replaced by ``***``, in
a line's traceback too. ``--log-level`` sets rabbitq's level and the app's own; the
AMQP client libraries (:data:`LIBRARIES`) have their own (``--log-level-libraries``),
so that rabbitq's debug lines are not lost among theirs."""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from typing import Any

import orjson

from .._worker.consumer_timeout import ONCE
from ..settings import scrub


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message (and exc_info)."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        # Set by rabbitq.tracing.TraceIds inside a traced delivery or publish.
        for key in ("trace_id", "span_id"):
            if value := getattr(record, key, ""):
                entry[key] = value
        if record.exc_info:
            entry["exc_info"] = record.exc_text or self.formatException(record.exc_info)
        return orjson.dumps(entry).decode()


class Redact(logging.Filter):
    """Replaces each secret in a record's final text with ``***``."""

    def __init__(self, secrets: list[str]) -> None:
        super().__init__()
        self.secrets = [s for s in secrets if s]

    def filter(self, record: logging.LogRecord) -> bool:
        if self.secrets:
            text = record.getMessage()
            for secret in self.secrets:
                text = scrub(text, secret)
            record.msg, record.args = text, None
            if record.exc_info and not record.exc_text:  # what formatters print
                trace = logging.Formatter().formatException(record.exc_info)
                for secret in self.secrets:
                    trace = scrub(trace, secret)
                record.exc_text = trace
        return True


class FirstProcessOnly(logging.Filter):
    """Lets the records marked once per run (``extra={ONCE: True}``: what the start-up
    says of the configuration) through in the first process of a run that logs one,
    and drops them in the later ones: ``told`` (a ``multiprocessing`` Event) is shared
    by the processes of a run, the workers ``--reload`` starts one after the other."""

    def __init__(self, told: Any) -> None:
        super().__init__()
        self.told = told
        self.first = False

    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(record, ONCE, False) or self.first:
            return True
        if self.told.is_set():
            return False
        self.told.set()
        self.first = True
        return True


LIBRARIES = ("aio_pika", "aiormq", "pamqp")
"""The loggers of the AMQP client libraries, set apart by ``--log-level-libraries``."""
OFF = "off"
"""Their default level: they log every failed (re)connect attempt with a traceback, and
rabbitq says it once, in words."""


def configure(
    *,
    level: str = "INFO",
    json: bool = False,
    secrets: list[str] | None = None,
    libraries: str = OFF,
) -> None:
    """Send rabbitq's (and the app's) logs at ``level`` to stderr in the chosen format;
    the AMQP client libraries' at ``libraries`` (``off``: their CRITICAL lines only)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        JsonFormatter()
        if json
        else logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    )
    handler.addFilter(Redact(secrets or []))
    if json:
        from ..tracing.logs import TraceIds

        handler.addFilter(TraceIds())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    quiet = logging.CRITICAL if libraries.lower() == OFF else libraries.upper()
    for name in LIBRARIES:
        logging.getLogger(name).setLevel(quiet)
