"""rabbitq: RabbitMQ consumers that never lose work.

Typed messages in; handled, retried through per-delay TTL queues, or dead-lettered
with the reason attached. See the README for the guarantees and a tutorial.
"""

from importlib.metadata import PackageNotFoundError, version

from .app import App, Context, Handler, load_app
from .breaker import Breaker
from .consumer import Worker
from .endpoints import serve_metrics
from .errors import (
    AppLoadError,
    BrokerUnavailable,
    ConfigurationError,
    DecodeError,
    DlqError,
    DlqInterrupted,
    PartialPublish,
    PermanentError,
    PublishError,
    PublishInterrupted,
    PublishNacked,
    RabbitqError,
    TopologyMismatch,
    Unroutable,
)
from .hooks import Hooks
from .message import Message
from .metrics import Metrics
from .publisher import Publisher
from .retry import RetryPolicy
from .settings import TLS

try:
    __version__ = version("rabbitq")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"

__all__ = [
    "App",
    "AppLoadError",
    "Breaker",
    "BrokerUnavailable",
    "ConfigurationError",
    "Context",
    "DecodeError",
    "DlqError",
    "DlqInterrupted",
    "Handler",
    "Hooks",
    "Message",
    "Metrics",
    "PartialPublish",
    "PermanentError",
    "PublishError",
    "PublishInterrupted",
    "PublishNacked",
    "Publisher",
    "RabbitqError",
    "RetryPolicy",
    "TLS",
    "TopologyMismatch",
    "Unroutable",
    "Worker",
    "__version__",
    "load_app",
    "serve_metrics",
]
