"""Gathering ``rabbitq doctor``'s facts: over AMQP (version, queues, argument drift)
and, when it answers, RabbitMQ's management API (arguments, policies, every queue on
the vhost, resource alarms). The decisions are :mod:`rabbitq._ops.doctor`'s.

The management API is reached at ``--management-url``, default
``http://<first broker host>:15672``, with the user and password of the broker URL;
neither is ever printed.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import aiormq
from aio_pika.abc import AbstractConnection

from .._amqp import orphans
from .._amqp.brokers import facts_for, server_properties, version_from_server_properties
from .._amqp.connection import connect_once
from .._amqp.partitions import probe as probe_partitions
from .._amqp.topology import mismatch_from_error
from ..app import App
from ..effects.location import RedisLocation
from ..ladder.plan import ALTERNATE_EXCHANGE, DELIVER_EXCHANGE
from ..ladder.probe import probe as probe_catch_all
from ..settings import TLS, broker_urls, redact_url, scrub
from .doctor_facts import Facts, QueueState, StoreFacts

MANAGEMENT_PORT = 15672
TIMEOUT = 5.0


@dataclass(frozen=True)
class Management:
    """Where the management API is and how to log in (the password is never shown)."""

    base: str
    user: str
    password: str
    vhost: str

    @classmethod
    def for_broker(cls, url: str, override: str | None = None) -> Management:
        """The API of the first broker in ``url`` (or ``override``), as its user."""
        first = urlsplit(broker_urls(url)[0])
        base = override or f"http://{first.hostname}:{MANAGEMENT_PORT}"
        vhost = unquote(first.path[1:]) if len(first.path) > 1 else "/"
        return cls(
            base=base.rstrip("/"),
            user=unquote(first.username or "guest"),
            password=unquote(first.password or "guest"),
            vhost=vhost,
        )

    def get(self, path: str) -> Any:
        """``GET /api/<path>`` as JSON (blocking; call in a thread)."""
        request = urllib.request.Request(f"{self.base}/api/{path}")
        token = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            return json.loads(response.read())

    def queues(self) -> list[dict[str, Any]]:
        """Every queue of the vhost: name, depth, arguments and policies."""
        columns = (
            "name,messages,messages_ready,messages_unacknowledged,arguments,policy,"
            "operator_policy,effective_policy_definition"
        )
        found = self.get(f"queues/{quote(self.vhost, safe='')}?columns={columns}")
        return list(found) if isinstance(found, list) else []

    def deliver_alternate(self) -> bool:
        """Whether a policy gives ``rabbitq.delay.deliver`` an ``alternate-exchange``."""
        vhost = quote(self.vhost, safe="")
        exchange = self.get(f"exchanges/{vhost}/{quote(DELIVER_EXCHANGE, safe='')}")
        name = exchange.get("policy") if isinstance(exchange, dict) else None
        if not name:
            return False
        policy = self.get(f"policies/{vhost}/{quote(str(name), safe='')}")
        return ALTERNATE_EXCHANGE in (policy.get("definition") or {})

    def alarms(self) -> list[str]:
        """The resource alarms in effect, one line per node and kind."""
        out = []
        for node in self.get("nodes?columns=name,mem_alarm,disk_free_alarm"):
            for key, kind in (("mem_alarm", "memory"), ("disk_free_alarm", "disk")):
                if node.get(key):
                    out.append(f"{kind} alarm on {node.get('name')}")
        return out


async def gather(
    app: App,
    *,
    url: str,
    tls: TLS | None = None,
    management_url: str | None = None,
    consumer_timeout: float | None = None,
) -> Facts:
    """Connect, look, disconnect: the facts :func:`rabbitq._ops.doctor.diagnose` needs."""
    topology = app.topology()
    connection = await connect_once(url, name="rabbitq doctor", tls=tls)
    try:
        version = version_from_server_properties(server_properties(connection))
        declared = await _declared(connection, app)
        # Over AMQP too, for when the management API does not answer (it lists them all).
        found = await orphans.find(connection, topology)
        catch_all = await probe_catch_all(connection)
    finally:
        await connection.close()
    partitions = None
    if topology.partitioning is not None:  # its own connection: a missing type closes it
        probing = await connect_once(url, name="rabbitq doctor", tls=tls)
        try:
            partitions = await probe_partitions(probing)
        finally:
            with contextlib.suppress(Exception):
                await probing.close()
    management = Management.for_broker(url, management_url)
    queues: dict[str, QueueState] = {}
    other: dict[str, int] | None = None
    other_arguments: dict[str, dict[str, Any]] | None = None
    alarms: list[str] | None = None
    alternate_policy = False
    error: str | None = None
    try:
        listed = await _listed(management, {spec.name for spec in topology.queues})
        alarms = await asyncio.to_thread(management.alarms)
        if catch_all.has_argument is False:
            alternate_policy = await asyncio.to_thread(management.deliver_alternate)
    except (OSError, ValueError, urllib.error.URLError) as exc:
        error = scrub(str(getattr(exc, "reason", None) or exc), management.password)
    else:
        other = {q["name"]: int(q.get("messages") or 0) for q in listed}
        other_arguments = {q["name"]: dict(q.get("arguments") or {}) for q in listed}
        by_name = {q["name"]: q for q in listed}
        for spec in topology.queues:
            if spec.name in by_name:
                queues[spec.name] = _state(by_name[spec.name], declared[spec.name])
    for spec in topology.queues:  # without the API, what AMQP told
        queues.setdefault(spec.name, declared[spec.name])
    if other is None:  # the retry queues of common delays, probed over AMQP
        other = {d.name: d.messages for d in found}
    return Facts(
        broker=facts_for(version),
        topology=topology,
        handlers=app.handlers,
        queues=queues,
        consumer_timeout=consumer_timeout,
        management_url=redact_url(management.base),
        management_error=error,
        other_queues=other,
        other_arguments=other_arguments,
        alarms=alarms,
        partitions_problem=partitions,
        delay_catch_all=catch_all,
        delay_alternate_policy=alternate_policy,
        vhost=management.vhost,
        stores=[await _redis_facts(where) for where in redis_locations(app)],
    )


def redis_locations(app: App) -> list[RedisLocation]:
    """The Redis servers of ``app``'s stores (idempotency, status, cancellations, keys),
    each once."""
    stores: list[Any] = [app.idempotency]
    if app.status_writer is not None:
        stores.append(app.status_writer.store)
    stores += [getattr(s, "store", None) for s in (*app.delivery_stages, *app.publish_steps)]
    found: dict[str, RedisLocation] = {}
    for store in stores:
        where = getattr(store, "location", None)
        if isinstance(where, RedisLocation):
            found.setdefault(where.url, where)
    return list(found.values())


async def _redis_facts(where: RedisLocation) -> StoreFacts:
    import redis.asyncio as aioredis
    from redis.exceptions import RedisError

    from ..effects.epoch import persistence

    shown = redact_url(where.url)
    client = aioredis.Redis.from_url(
        where.url, socket_timeout=TIMEOUT, socket_connect_timeout=TIMEOUT,
        client_name="rabbitq-doctor",
    )  # fmt: skip
    try:
        appendonly, save = await persistence(client)
    except (RedisError, OSError) as exc:
        return StoreFacts(where=shown, error=scrub(str(exc), urlsplit(where.url).password))
    finally:
        await client.aclose()
    return StoreFacts(where=shown, appendonly=appendonly, save=save)


async def _listed(management: Management, ours: set[str], attempts: int = 8) -> list[Any]:
    """The vhost's queues, waiting (a few seconds at most) until the broker has
    collected the statistics of ours: a queue declared a moment ago is listed with its
    name and arguments only, without its policies."""
    for _ in range(attempts - 1):
        listed = await asyncio.to_thread(management.queues)
        if all("effective_policy_definition" in q for q in listed if q.get("name") in ours):
            return listed
        await asyncio.sleep(1)
    return await asyncio.to_thread(management.queues)


def _state(queue: Mapping[str, Any], amqp: QueueState) -> QueueState:
    effective = queue.get("effective_policy_definition")
    depth = queue.get("messages")
    return QueueState(
        name=str(queue["name"]),
        exists=True,
        messages=int(depth) if isinstance(depth, int) else amqp.messages,
        stuck=_stuck(queue),
        arguments=dict(queue.get("arguments") or {}),
        policy=queue.get("policy") or None,
        operator_policy=queue.get("operator_policy") or None,
        effective_policy=dict(effective) if isinstance(effective, Mapping) else {},
    )


def _stuck(queue: Mapping[str, Any]) -> int:
    counts = [queue.get(k) for k in ("messages", "messages_ready", "messages_unacknowledged")]
    numbers = [c for c in counts if isinstance(c, int)]
    if len(numbers) != 3:
        return 0
    total, ready, unacked = numbers
    return max(0, total - ready - unacked)


async def _declared(connection: AbstractConnection, app: App) -> dict[str, QueueState]:
    """Each queue of the app: does it exist, how deep, and would the app's declare be
    refused (a redeclare with the same arguments changes nothing; other arguments are
    refused with PRECONDITION_FAILED, and the channel with it)."""
    states: dict[str, QueueState] = {}
    for spec in app.topology().queues:
        channel = await connection.channel(publisher_confirms=False)
        try:
            queue = await channel.declare_queue(spec.name, passive=True)
        except aiormq.exceptions.ChannelNotFoundEntity:
            states[spec.name] = QueueState(name=spec.name, exists=False)
            continue
        messages = queue.declaration_result.message_count
        mismatch = None
        try:
            await channel.declare_queue(spec.name, durable=True, arguments=dict(spec.arguments))
        except aiormq.exceptions.ChannelPreconditionFailed as exc:
            explained = mismatch_from_error(exc, app.topology())  # e.g. the other queue type
            mismatch = str(explained) if explained else str(exc.args[0] if exc.args else exc)
        finally:
            if not channel.is_closed:
                await channel.close()
        states[spec.name] = QueueState(
            name=spec.name, exists=True, messages=messages, mismatch=mismatch
        )
    return states
