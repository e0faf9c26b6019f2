"""Log set-up for the CLI: readable lines by default, one JSON object per line with
``--log-json``; either way a secret (the broker password) is replaced by ``***``."""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime

import orjson

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
            entry["exc_info"] = self.formatException(record.exc_info)
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
        return True


def configure(*, level: str = "INFO", json: bool = False, secrets: list[str] | None = None) -> None:
    """Send rabbitq's (and aio-pika's) logs to stderr in the chosen format."""
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
    # aio-pika and aiormq log every failed (re)connect attempt with a traceback;
    # rabbitq says it once, in words, so theirs are shown only when debugging.
    quiet = root.level if root.level <= logging.DEBUG else logging.CRITICAL
    logging.getLogger("aio_pika").setLevel(quiet)
    logging.getLogger("aiormq").setLevel(quiet)
