"""Shared fixtures. Integration tests talk to a real RabbitMQ found in this order:

1. ``$RABBITQ_TEST_URL``;
2. a broker on localhost:5672 (guest/guest);
3. a throwaway testcontainers RabbitMQ, where Docker runs.

With none of them the broker tests fail in CI (``CI`` set) and skip elsewhere.
Every test gets its own queue and exchange names (uuid suffix) and deletes them.
A red run ends with its failures by kind (:mod:`tests.failure_kinds`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import uuid
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import aio_pika
import pytest
from aio_pika.abc import AbstractRobustConnection

from rabbitq import App
from rabbitq._ops.containers import throwaway_broker

from .broker_node import BrokerNode
from .failure_kinds import pytest_runtest_makereport, pytest_terminal_summary
from .helpers import (
    CONSISTENT_HASH_PLUGIN,
    DELETED_QUEUES,
    ENABLE_CONSISTENT_HASH,
    broker_has_consistent_hash,
    delete_app_objects,
    purge_undeliverable,
    redis_key_prefix,
)

LOCAL_URL = "amqp://guest:guest@127.0.0.1:5672/"

__all__ = ["pytest_runtest_makereport", "pytest_terminal_summary"]
"""The hooks of :mod:`tests.failure_kinds`: a red run's last lines say which failures are
timing under load and which are broken promises."""


ONE_WORKER = frozenset(
    {
        "tests/chaos/test_cluster.py",  # forms a 3-node cluster (module fixture)
        "tests/chaos/test_netns_partitions.py",  # a 3-node cluster in network namespaces
        "tests/integration/amqp/test_tls.py",  # a private TLS node (module fixture)
        "tests/integration/ops/test_doctor.py",  # a private node with management
        "tests/integration/worker/test_consumer_timeout.py",  # a node with consumer_timeout
        "tests/project/test_docs_site.py",  # builds the site once for two tests
    }
)
"""Modules whose tests all run on one xdist worker, so that their module-scoped fixture
(something expensive: a private node, a cluster, a site build) starts once, not once per
worker. Any other test goes to whichever worker is free."""


SERVICE_FIXTURES = frozenset(
    {
        "broker_url",  # RabbitMQ: every broker fixture (connection, make_app, ...) uses it
        "suite_broker_url",
        "hash_broker_url",  # a broker with the consistent-hash exchange plugin
        "chaos_node",  # private RabbitMQ nodes, a cluster, a TLS node, a Redis node
        "delay_node",
        "node",
        "cluster",
        "netns_cluster",
        "broker",
        "pg",  # PostgreSQL
        "pg_url",
        "make_pg_store",
        "make_outbox",
        "make_store",  # both stores, by getfixturevalue (not in the fixture closure)
        "redis_url",  # Redis
        "redis_prefix",
        "make_redis_store",
        "prometheus_binary",  # a real Prometheus
        "browser",  # headless Chromium
    }
)
"""Fixtures that reach a service: a test using any of them (directly or through another
fixture) is marked ``services``; so is a test using a fixture of a module's own written
with :func:`tests.helpers.service_fixture`."""

SERVICE_FOLDERS = ("tests/integration/", "tests/chaos/", "tests/console/test_console_browser.py")
"""Every test under these paths is marked ``services``. A module elsewhere that reaches a
service without the fixtures above (a subprocess worker, the ``rabbitq`` command against
a broker, its own client) says so with ``pytestmark = pytest.mark.services``."""

SERVICE_PORTS = frozenset({4369, 5671, 5672, 15672, 25672, 5432, 6379, 9090})
"""RabbitMQ (epmd, AMQP, AMQPS, management, distribution), PostgreSQL, Redis and
Prometheus: a test without the ``services`` marker that connects to one fails."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks the tests that need a service (:data:`SERVICE_FIXTURES`,
    :data:`SERVICE_FOLDERS`) ``services``, so that ``-m "not services"`` runs the rest.

    Under pytest-xdist (``-n 4`` in pyproject's addopts) the tests marked ``slow`` go
    first, so that no worker starts a minute-long test while the others run out of work.
    The order is the same in every worker (xdist requires it); in one process it is left
    as collected."""
    root = config.rootpath
    for item in items:
        path = item.path.relative_to(root).as_posix() if item.path.is_relative_to(root) else ""
        uses = SERVICE_FIXTURES.intersection(getattr(item, "fixturenames", ()))
        info = getattr(item, "_fixtureinfo", None)
        defs = info.name2fixturedefs.values() if info is not None else ()
        local = any(getattr(d.func, "reaches_service", False) for ds in defs for d in ds)
        if uses or local or path.startswith(SERVICE_FOLDERS):
            item.add_marker(pytest.mark.services)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's ``load`` scheduling, except that each module of :data:`ONE_WORKER` is one
    unit of work (handed out first, being bigger). Not ``--dist loadgroup``: pytest-xdist
    3.8 marks a group by renaming ``item._nodeid``, which pytest 9 no longer reads, so its
    groups are silently split."""
    from xdist.scheduler import LoadScopeScheduling

    class ModulesOnOneWorker(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if module in ONE_WORKER else nodeid

    return ModulesOnOneWorker(config, log)


class ServiceNeeded(RuntimeError):
    """A test without the ``services`` marker connected to a service's port."""


@pytest.fixture(autouse=True)
def _unit_tests_reach_no_service(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """A test not marked ``services`` that connects to a service's port (in this process:
    :data:`SERVICE_PORTS`) fails at once with a message saying so, instead of passing here
    and failing, or hanging in a retry loop, where no service runs (``-m "not services"``
    with no network). It fails at teardown, too, if the code under test swallowed the
    error."""
    if request.node.get_closest_marker("services") is not None:
        yield
        return
    reached: list[Any] = []
    connect, connect_ex = socket.socket.connect, socket.socket.connect_ex

    def check(address: Any) -> None:
        if isinstance(address, tuple) and len(address) >= 2 and address[1] in SERVICE_PORTS:
            reached.append(address)
            raise ServiceNeeded(
                f"{request.node.nodeid} connects to {address[0]}:{address[1]} (a service) "
                "but is not marked services: mark it (pytestmark = pytest.mark.services) "
                "or use a fixture of tests/conftest.py's SERVICE_FIXTURES"
            )

    def guarded_connect(self: socket.socket, address: Any) -> None:
        check(address)
        connect(self, address)

    def guarded_connect_ex(self: socket.socket, address: Any) -> int:
        check(address)
        return connect_ex(self, address)

    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
    monkeypatch.setattr(socket.socket, "connect_ex", guarded_connect_ex)
    yield
    if reached:
        pytest.fail(f"not marked services, but connected to {reached[0]}", pytrace=False)


def _port_open(host: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1):
        return True
    return False


def _purge_left_delays(url: str) -> None:
    """At the end of the session: the delayed messages and retries this session's
    deleted apps left behind, which reached the shared broker's
    ``rabbitq.delay.undeliverable`` (this session's queue names only; best effort)."""

    async def purge() -> None:
        async with asyncio.timeout(30):
            await purge_undeliverable(url, DELETED_QUEUES)

    with contextlib.suppress(Exception):
        asyncio.run(purge())


@pytest.fixture(scope="session")
def suite_broker_url() -> Iterator[str]:
    """The URL of the real RabbitMQ this test session runs against (see the module's
    docstring); tests ask for :func:`broker_url`, which a module may override."""
    if url := os.environ.get("RABBITQ_TEST_URL"):
        yield url
        _purge_left_delays(url)
        return
    if _port_open("127.0.0.1", 5672):
        yield LOCAL_URL
        _purge_left_delays(LOCAL_URL)
        return
    with contextlib.ExitStack() as stack:
        try:
            with warnings.catch_warnings():  # testcontainers' own deprecations, not ours
                warnings.simplefilter("ignore", DeprecationWarning)
                url = stack.enter_context(throwaway_broker())
        except Exception as exc:  # no Docker engine, no image: say so plainly
            reason = (
                "no RabbitMQ: set RABBITQ_TEST_URL, start one on localhost:5672 "
                f"('rabbitmq-server -detached'), or run Docker for testcontainers ({exc})"
            )
            if os.environ.get("CI"):
                pytest.fail(reason)
            pytest.skip(reason)
        yield url


@pytest.fixture(scope="session")
def broker_url(suite_broker_url: str) -> str:
    """The URL of a real RabbitMQ for this test session. A module whose tests need the
    consistent-hash exchange overrides it with :func:`hash_broker_url`'s."""
    return suite_broker_url


@pytest.fixture(scope="session")
def hash_broker_url(suite_broker_url: str) -> Iterator[str]:
    """A RabbitMQ with the consistent-hash exchange plugin, which ``App(partitions=N)``
    routes through (shipped with RabbitMQ, off by default): the broker under test when
    it has the plugin enabled (CI's ``.ci/run`` enables it on the machine's broker),
    else a private node of this test process's own started with it (~6 s, once per
    pytest-xdist worker that needs it). Without ``rabbitmq-server`` to start one, the
    test skips with the line that says how to enable the plugin (fails in CI)."""
    if broker_has_consistent_hash(suite_broker_url):
        yield suite_broker_url
        return
    if shutil.which("rabbitmq-server") is None:
        reason = f"the consistent-hash exchange plugin is off: {ENABLE_CONSISTENT_HASH}"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    with BrokerNode.started("rabbitq-hash", plugins=(CONSISTENT_HASH_PLUGIN,)) as node:
        yield node.url


@pytest.fixture
def uid() -> str:
    """A short unique suffix for this test's names."""
    return uuid.uuid4().hex[:10]


@pytest.fixture
async def connection(broker_url: str) -> AsyncIterator[AbstractRobustConnection]:
    """A plain aio-pika connection for arranging and inspecting broker state."""
    conn = await aio_pika.connect_robust(broker_url)
    try:
        yield conn
    finally:
        await conn.close()


@pytest.fixture
async def make_app(
    connection: AbstractRobustConnection, broker_url: str, uid: str
) -> AsyncIterator[Callable[..., App]]:
    """``make_app(**kwargs)``: an App with this test's own queue and exchange names.

    ``create=`` builds it with another factory taking the same keywords (an example's
    ``create_app``). Every app made is deleted from the broker after the test.
    """
    made: list[App] = []

    def factory(*, create: Callable[..., App] = App, **kwargs: Any) -> App:
        kwargs.setdefault("queue", f"t.{uid}.q{len(made)}")
        kwargs.setdefault("exchange", f"t.{uid}.x")
        kwargs.setdefault("url", broker_url)
        app = create(**kwargs)
        made.append(app)
        return app

    try:
        yield factory
    finally:
        for app in made:
            await delete_app_objects(connection, app)


@pytest.fixture
async def redis_prefix() -> AsyncIterator[str]:
    """A key prefix of this test's own in the real Redis, its keys deleted after."""
    async with redis_key_prefix() as name:
        yield name
