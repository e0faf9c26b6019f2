"""rabbitq: RabbitMQ consumers that never lose work.

Typed messages in; handled, retried through per-delay TTL queues, or dead-lettered
with the reason attached. See the README for the guarantees and a tutorial.
"""

from importlib.metadata import PackageNotFoundError, version

from ._amqp.publisher import Publisher
from ._amqp.sync_publisher import SyncPublisher
from ._ops.endpoints import serve_metrics
from ._ops.metrics import Metrics
from ._worker.laned import PriorityWorker
from ._worker.lifecycle import Worker
from ._worker.partitioned import PartitionedWorker
from .app import App
from .batch import BatchContext, BatchResult
from .breaker import Breaker
from .context import Context
from .errors import (
    AppLoadError,
    BrokerUnavailable,
    ConfigurationError,
    DecodeError,
    DelayError,
    DlqError,
    DlqInterrupted,
    HandlerNotStarted,
    HandlerTimeout,
    MiddlewareError,
    PartialPublish,
    PermanentError,
    PublishError,
    PublishInterrupted,
    PublishNacked,
    RabbitqError,
    RetryLater,
    TopologyMismatch,
    Unroutable,
    WorkflowIdInUse,
)
from .handler import Handler
from .hooks import Hooks
from .job import Job, Middleware
from .loader import load_app
from .message import Message
from .outcome import Outcome
from .retry import RetryPolicy
from .settings import TLS
from .workflow import chain, chord, group

try:
    __version__ = version("rabbitq")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"

__all__ = [
    "App",
    "AppLoadError",
    "BatchContext",
    "BatchResult",
    "Breaker",
    "BrokerUnavailable",
    "ConfigurationError",
    "Context",
    "DecodeError",
    "DelayError",
    "DlqError",
    "DlqInterrupted",
    "Handler",
    "HandlerNotStarted",
    "HandlerTimeout",
    "Hooks",
    "Job",
    "Message",
    "Metrics",
    "Middleware",
    "MiddlewareError",
    "Outcome",
    "PartialPublish",
    "PartitionedWorker",
    "PermanentError",
    "PriorityWorker",
    "PublishError",
    "PublishInterrupted",
    "PublishNacked",
    "Publisher",
    "RabbitqError",
    "RetryLater",
    "RetryPolicy",
    "SyncPublisher",
    "TLS",
    "TopologyMismatch",
    "Unroutable",
    "Worker",
    "WorkflowIdInUse",
    "__version__",
    "chain",
    "chord",
    "group",
    "load_app",
    "serve_metrics",
]
