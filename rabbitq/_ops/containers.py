"""A throwaway RabbitMQ in a Docker container (testcontainers), for the demo and for
test suites on machines that have Docker but no broker."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
import warnings
from collections.abc import Iterator
from typing import Any

from ..errors import BrokerUnavailable

CONTAINER_IMAGE = "rabbitmq:3.13"


def docker_available(timeout: float = 0.5) -> bool:
    """Whether ``--testcontainers`` could work: the package is installed and a Docker
    engine accepts connections (at ``$DOCKER_HOST``, else the usual socket)."""
    if importlib.util.find_spec("testcontainers") is None:
        return False
    # Docker's own setting, read here only to word a hint; the docker client reads it too.
    host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    scheme, _, where = host.partition("://")
    try:
        if scheme == "unix":
            with socket.socket(socket.AF_UNIX) as sock:
                sock.settimeout(timeout)
                sock.connect(where)
        elif scheme == "tcp":
            name, _, port = where.rstrip("/").rpartition(":")
            with socket.create_connection((name, int(port)), timeout=timeout):
                pass
        else:  # ssh:// and the like: assume it works rather than try it
            return True
    except (OSError, ValueError):
        return False
    return True


def _container_class() -> Any:
    try:
        return importlib.import_module("testcontainers.community.rabbitmq").RabbitMqContainer
    except ImportError:
        pass
    try:
        with warnings.catch_warnings():  # the pre-4.10 location, deprecated since
            warnings.simplefilter("ignore", DeprecationWarning)
            return importlib.import_module("testcontainers.rabbitmq").RabbitMqContainer
    except ImportError as exc:
        raise BrokerUnavailable(
            "--testcontainers needs the testcontainers package: "
            "pip install 'testcontainers[rabbitmq]'"
        ) from exc


@contextlib.contextmanager
def throwaway_broker(image: str = CONTAINER_IMAGE) -> Iterator[str]:
    """Start a RabbitMQ container with testcontainers, yield its URL, then remove it."""
    container_class = _container_class()
    try:
        container = container_class(image)
        container.start()
    except Exception as exc:
        detail = (str(exc).splitlines() or [""])[0][:200] or type(exc).__name__
        raise BrokerUnavailable(
            f"--testcontainers could not start a RabbitMQ container: is Docker running? "
            f"({type(exc).__name__}: {detail})"
        ) from exc
    try:
        host = container.get_container_host_ip()
        port = container.get_exposed_port(container.port)
        yield f"amqp://{container.username}:{container.password}@{host}:{port}/"
    finally:
        container.stop()
