"""rabbitq: RabbitMQ consumers that never lose work.

Typed messages in; handled, retried through per-delay TTL queues, or dead-lettered
with the reason attached. See the README for the guarantees and a tutorial.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names, for type checkers and readers; imported on first use
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
    __version__: str

# Each public name and the module it comes from. They are imported on first use (PEP
# 562), so that importing rabbitq, or running ``rabbitq --version``, does not import
# aio-pika, pydantic and the worker before they are needed.
_FROM = {
    "App": ".app",
    "AppLoadError": ".errors",
    "BatchContext": ".batch",
    "BatchResult": ".batch",
    "Breaker": ".breaker",
    "BrokerUnavailable": ".errors",
    "ConfigurationError": ".errors",
    "Context": ".context",
    "DecodeError": ".errors",
    "DelayError": ".errors",
    "DlqError": ".errors",
    "DlqInterrupted": ".errors",
    "Handler": ".handler",
    "HandlerNotStarted": ".errors",
    "HandlerTimeout": ".errors",
    "Hooks": ".hooks",
    "Job": ".job",
    "Message": ".message",
    "Metrics": "._ops.metrics",
    "Middleware": ".job",
    "MiddlewareError": ".errors",
    "Outcome": ".outcome",
    "PartialPublish": ".errors",
    "PartitionedWorker": "._worker.partitioned",
    "PermanentError": ".errors",
    "PriorityWorker": "._worker.laned",
    "PublishError": ".errors",
    "PublishInterrupted": ".errors",
    "PublishNacked": ".errors",
    "Publisher": "._amqp.publisher",
    "RabbitqError": ".errors",
    "RetryLater": ".errors",
    "RetryPolicy": ".retry",
    "SyncPublisher": "._amqp.sync_publisher",
    "TLS": ".settings",
    "TopologyMismatch": ".errors",
    "Unroutable": ".errors",
    "Worker": "._worker.lifecycle",
    "WorkflowIdInUse": ".errors",
    "chain": ".workflow",
    "chord": ".workflow",
    "group": ".workflow",
    "load_app": ".loader",
    "serve_metrics": "._ops.endpoints",
}


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("rabbitq")
        except PackageNotFoundError:  # running from a source tree that is not installed
            found = "0+unknown"
    elif name in _FROM:
        import importlib

        found = getattr(importlib.import_module(_FROM[name], __name__), name)
    else:
        raise AttributeError(f"module 'rabbitq' has no attribute {name!r}")
    globals()[name] = found  # once: the next lookup does not come here
    return found


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


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
