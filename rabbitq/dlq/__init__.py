"""Dead-letter queue operations as library functions: list, show, replay, export,
import and purge (the ``rabbitq dlq`` commands call these).

The package holds one concept per module: :mod:`.message` (a dead message and its
filters, pure; its copies are :mod:`rabbitq._amqp.copy`'s), :mod:`.text` (its text,
escaped to be shown), :mod:`.file` (the JSONL export format, pure),
:mod:`.tally` (what an operation did), :mod:`.reader` (reading a DLQ without removing
anything, and the preamble every operation shares), :mod:`.mover` (copy, confirm,
then ack), :mod:`.operations` (list, show, replay, purge) and :mod:`.transfer`
(export, read_file, import). It imports nothing from :mod:`rabbitq.worker`.

The package exports the operations and the types they take and give; the helpers
(``parse_when``, ``reason_of``, ``origin_of``, ``failed_at_of``, ``resolve_dlq``), the
constants and the copies (:mod:`rabbitq._amqp.copy`) are imported from their modules.
"""

from .message import DeadMessage, Filters
from .message import resolve_dlq as resolve_dlq  # not in __all__: for rabbitq.cli.dlq
from .operations import list_messages, purge, replay, show
from .tally import Progress, Tally
from .transfer import export, import_messages, read_file

__all__ = [
    "DeadMessage",
    "Filters",
    "Progress",
    "Tally",
    "export",
    "import_messages",
    "list_messages",
    "purge",
    "read_file",
    "replay",
    "show",
]
