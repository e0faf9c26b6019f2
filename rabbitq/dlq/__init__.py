"""Dead-letter queue operations as library functions: list, show, replay, export,
import and purge (the ``rabbitq dlq`` commands call these).

The package holds one concept per module: :mod:`.message` (a dead message and its
filters, pure; its copies are :mod:`rabbitq.amqp.copy`'s), :mod:`.text` (its text,
escaped to be shown), :mod:`.file` (the JSONL export format, pure),
:mod:`.tally` (what an operation did), :mod:`.reader` (reading a DLQ without removing
anything, and the preamble every operation shares), :mod:`.mover` (copy, confirm,
then ack), :mod:`.operations` (list, show, replay, purge) and :mod:`.transfer`
(export, read_file, import). It imports nothing from :mod:`rabbitq.worker`.
"""

from ..amqp.copy import replay as replay_copy
from ..amqp.copy import replay_headers
from ..amqp.copy import stored as stored_copy
from .message import (
    BROKER_REASON,
    DeadMessage,
    Filters,
    failed_at_of,
    origin_of,
    parse_when,
    reason_of,
    resolve_dlq,
)
from .operations import DEFAULT_WINDOW, list_messages, purge, replay, show
from .tally import Progress, Tally
from .transfer import export, import_messages, read_file

__all__ = [
    "BROKER_REASON",
    "DEFAULT_WINDOW",
    "DeadMessage",
    "Filters",
    "Progress",
    "Tally",
    "export",
    "failed_at_of",
    "import_messages",
    "list_messages",
    "origin_of",
    "parse_when",
    "purge",
    "read_file",
    "reason_of",
    "replay",
    "replay_copy",
    "replay_headers",
    "resolve_dlq",
    "show",
    "stored_copy",
]
