"""``rabbitq topology`` and ``rabbitq stats``: declare an app's queues, show their depths."""

from __future__ import annotations

import asyncio
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from .._amqp import orphans, teardown
from .._amqp.connection import connect
from .._amqp.topology import (
    QueueDepth,
    Topology,
    declare,
    dlq_name,
    queue_depths,
    retry_queue_name,
)
from ..errors import ConfigurationError
from ..ladder.plan import UNDELIVERABLE, deliver_arguments, destination_arguments
from ..loader import load_app
from ..retry import RetryPolicy, delay_ms
from ..schedule.plan import progress_queue
from ..settings import TLS, redact_url, resolve_url
from .common import friendly_errors, json_option, print_json, tls_options, url_option
from .when import DURATION


def _topology_rows(topology: Topology) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [
        {"kind": "exchange", "name": topology.exchange, "arguments": {"type": "topic"}}
    ]
    rows += [
        {"kind": q.kind, "name": q.name, "arguments": dict(q.arguments)} for q in topology.queues
    ]
    rows += [
        {
            "kind": "binding",
            "name": f"{topology.exchange} -> {topology.main.name}",
            "arguments": {"routing_key": k},
        }
        for k in topology.routing_keys
    ]
    rows += [  # App(priorities=N): each lane's own keys (docs/control.md)
        {"kind": "binding", "name": f"{topology.exchange} -> {q}", "arguments": {"routing_key": k}}
        for q, k in topology.lane_bindings
    ]
    if (p := topology.partitioning) is not None:  # App(partitions=N): docs/ordering.md
        rows.append({"kind": "exchange", "name": p.exchange, "arguments": p.hash_arguments})
        rows += [
            {"kind": "binding", "name": f"{p.source} -> {p.exchange}", "arguments": {"key": k}}
            for k in p.routing_keys
        ]
        shown = {q.name for q in topology.queues}
        rows += [
            {"kind": q.kind, "name": q.name, "arguments": dict(q.arguments)}
            for q in p.queues
            if q.name not in shown
        ]
        rows += [
            {"kind": "binding", "name": f"{p.exchange} -> {m}", "arguments": {"weight": "1"}}
            for m in p.mains
        ]
    ladder = topology.ladder
    levels = ladder.levels
    rows += [
        {
            "kind": "exchange",
            "name": ladder.deliver_exchange,
            "arguments": {"type": "headers", **deliver_arguments()},
        },
        {
            "kind": "catch-all",
            "name": UNDELIVERABLE,
            "arguments": {"exchange": "fanout", "holds": "delayed messages whose queue is gone"},
        },
        *(
            {
                "kind": "binding",
                "name": f"{ladder.deliver_exchange} -> {name}",
                "arguments": destination_arguments(name),
            }
            for name in (topology.main.name, *(lane.name for lane in topology.lanes))
        ),
        {
            "kind": "delay ladder",
            "name": f"{levels[0].name} .. {levels[-1].name.rpartition('.')[2]}",
            "arguments": {
                "shared": "by every app on the vhost",
                "levels": len(levels),
                "x-message-ttl": f"{levels[0].ttl_ms} .. {levels[-1].ttl_ms}",
                **{k: v for k, v in levels[0].arguments.items() if k != "x-message-ttl"},
                "x-dead-letter-exchange": "the level below",
            },
        },
    ]
    return rows


def _delays_ms(delays: tuple[float, ...]) -> list[int]:
    """Each ``--delay`` as the milliseconds of a retry queue; one no retry queue can
    have (0, or not whole milliseconds) is bad input (exit 2)."""
    try:
        return [delay_ms(d) for d in delays]
    except ConfigurationError as exc:
        raise click.BadParameter(str(exc), param_hint="--delay") from None


@click.command()
@click.argument("app_spec", metavar="MODULE:APP")
@click.option("--dry-run", is_flag=True, help="Print what would be declared; touch nothing.")
@click.option(
    "--prune",
    is_flag=True,
    help="Also delete the retry queues that no handler uses any more, if they are empty.",
)
@click.option(
    "--delay",
    "delays",
    type=DURATION,
    multiple=True,
    help="Also look for an orphaned retry queue of this delay (30, 90s, 10m; repeatable); "
    "common delays are always looked for.",
)
@click.option(
    "--delete",
    is_flag=True,
    help="Delete the app's queues instead (main, retry, DLQ, orphaned retry queues), and "
    "its exchange if nothing else is bound to it; refused if a queue holds messages or "
    "has consumers. With --dry-run: only say what would be deleted.",
)
@click.option("--force", is_flag=True, help="With --delete: delete queues that hold messages.")
@json_option
@url_option
@tls_options
@friendly_errors
def topology(
    app_spec: str,
    dry_run: bool,
    prune: bool,
    delays: tuple[float, ...],
    delete: bool,
    force: bool,
    as_json: bool,
    url: str | None,
    tls: TLS | None,
) -> None:
    """Declare the app's exchange, queues and bindings, and print them.

    Safe to run again: declaring what exists is a no-op. If a queue exists with other
    arguments, that queue is left as it is (objects declared before it stay declared)
    and the error names the queue and the argument. Retry queues of delays no handler
    uses any more (after a change of delays) are named with their depth; --prune
    deletes those that hold no message and have no consumer (checked just before the
    delete, on quorum and classic queues alike; stop workers that still run the old
    delays first). --delete removes the app from the broker. --json prints one JSON
    document. Examples:

    \b
        rabbitq topology myservice:app --dry-run
        rabbitq topology myservice:app --prune
        rabbitq topology myservice:app --delete --dry-run
        rabbitq topology myservice:app --json | python -m json.tool
    """
    if prune and dry_run:
        raise click.UsageError("--prune and --dry-run do not go together")
    if delete and prune:
        raise click.UsageError("--delete and --prune do not go together")
    if force and not delete:
        raise click.UsageError("--force needs --delete")
    app = load_app(app_spec)
    plan = app.topology()
    extra = _delays_ms(delays)
    if delete:
        _delete(app_spec, app.resolved_url(url), tls or app.tls, plan, extra,
                state_queues=[progress_queue(app.queue)],
                force=force, dry_run=dry_run, as_json=as_json)  # fmt: skip
        return
    found: list[QueueDepth] = []
    pruned: list[orphans.Pruned] = []
    if not dry_run:
        target = app.resolved_url(url)

        async def go() -> None:
            nonlocal found, pruned
            connection = await connect(target, name="rabbitq topology", tls=tls or app.tls)
            try:
                await declare(await connection.channel(), plan)
                found = await orphans.find(connection, plan, extra)
                if prune:
                    pruned = await orphans.prune(connection, found)
            finally:
                await connection.close()

        asyncio.run(go())
    rows = _topology_rows(plan)
    if prune:
        rows += [
            {"kind": "pruned" if p.deleted else "kept", "name": p.name, "arguments": {}}
            | ({} if p.deleted else {"messages": p.messages, "consumers": p.consumers})
            for p in pruned
        ]
    elif found:
        click.echo(f"warning: {orphans.warning(plan, found, app_spec=app_spec)}", err=True)
    if as_json:  # one document: a JSON array of the rows
        print_json(rows)
        return
    table = Table(title=f"{'would declare' if dry_run else 'declared'} for {app.queue!r}")
    for column in ("kind", "name", "arguments"):
        table.add_column(column)
    for row in rows:
        args = ", ".join(f"{k}={v!r}" for k, v in row["arguments"].items())
        if row["kind"] == "kept":
            args = (
                f"{row['messages']} message(s) still in it: prune again once it is empty"
                if row["messages"] or not row["consumers"]
                else f"{row['consumers']} consumer(s) on it: kept"
            )
        elif row["kind"] == "pruned":
            args = "empty, no handler uses it: deleted"
        table.add_row(row["kind"], row["name"], args)
    Console().print(table)


def _delete(
    app_spec: str,
    url: str,
    tls: TLS | None,
    plan: Topology,
    extra: list[int],
    *,
    state_queues: list[str],
    force: bool,
    dry_run: bool,
    as_json: bool,
) -> None:
    async def go() -> teardown.Teardown:
        connection = await connect(url, name="rabbitq topology", tls=tls)
        try:
            return await teardown.delete(
                connection,
                plan,
                extra_ms=extra,
                state_queues=state_queues,
                force=force,
                dry_run=dry_run,
            )
        finally:
            await connection.close()

    done = asyncio.run(go())
    if done.refusal and not dry_run:
        raise click.ClickException(done.refusal)
    rows = [
        {"kind": d.kind, "name": d.name, "messages": d.messages, "consumers": d.consumers}
        for d in done.queues
    ]
    if as_json:
        document = {
            "dry_run": dry_run,
            "deleted": done.deleted,
            "queues": rows,
            "exchange": {"name": plan.exchange, "state": done.exchange},
            "refusal": done.refusal or None,
        }
        print_json(document)
        return
    verb = "would delete" if dry_run else "deleted"
    if not rows:
        click.echo(f"nothing to delete: no queue of {app_spec} on {redact_url(url)}")
    for row in rows:
        click.echo(f"{verb} {row['kind']} queue {row['name']} ({row['messages']} message(s))")
    click.echo(f"exchange {plan.exchange}: {_EXCHANGE[dry_run][done.exchange]}")
    if done.refusal:  # a dry run: what the real one would answer
        click.echo(f"would refuse: {done.refusal}")


_EXCHANGE: dict[bool, dict[str, str]] = {  # by dry_run, then Teardown.exchange
    False: {
        "deleted": "deleted",
        "kept": "kept (other queues are bound to it)",
        "missing": "did not exist",
        "not deleted": "not deleted (the broker's own)",
    },
    True: {
        "exists": "would be deleted unless other queues are bound to it",
        "missing": "does not exist",
        "not deleted": "not deleted (the broker's own)",
    },
}


@click.command()
@click.argument("target", metavar="QUEUE|MODULE:APP")
@click.option(
    "--delay",
    "delays",
    type=DURATION,
    multiple=True,
    help="Also look for the retry queue of this delay (30, 90s, 10m; repeatable). "
    "Default with a QUEUE: the default policy's 1s, 10s, 1m, 10m.",
)
@json_option
@url_option
@tls_options
@friendly_errors
def stats(
    target: str, delays: tuple[float, ...], as_json: bool, url: str | None, tls: TLS | None
) -> None:
    """Messages and consumers of the main, retry and dead-letter queues.

    With MODULE:APP every retry queue of the app is shown; with a QUEUE name, the
    retry queues of --delay (or the default policy) that exist. --json prints one JSON
    array, the main queue first. Examples:

    \b
        rabbitq stats myservice:app
        rabbitq stats emails --delay 30s --delay 5m
        rabbitq stats myservice:app --json | python -m json.tool
    """
    if ":" in target:
        app = load_app(target)
        plan = app.topology()
        specs = plan.depth_specs()
        broker_url = app.resolved_url(url)
        tls = tls or app.tls
        show_missing = True
    else:
        ms = _delays_ms(delays) if delays else RetryPolicy().delays_ms
        specs = [
            (target, "main"),
            *((retry_queue_name(target, m), "retry") for m in sorted(set(ms))),
        ]
        specs.append((dlq_name(target), "dlq"))
        broker_url = resolve_url(url)
        show_missing = bool(delays)

    async def go() -> list[Any]:
        connection = await connect(broker_url, name="rabbitq stats", tls=tls)
        try:
            return await queue_depths(connection, specs)
        finally:
            await connection.close()

    depths = asyncio.run(go())
    main_depth = depths[0]
    if not main_depth.exists:
        raise click.ClickException(
            f"queue {main_depth.name!r} does not exist on {redact_url(broker_url)} "
            f"(run 'rabbitq topology MODULE:APP' or start its worker once)"
        )
    shown = [d for d in depths if d.exists or (show_missing and d.kind != "main")]
    if as_json:  # one document: a JSON array, the main queue first
        document = [
            {
                "queue": d.name,
                "kind": d.kind,
                "exists": d.exists,
                "messages": d.messages,
                "consumers": d.consumers,
            }
            for d in shown
        ]
        print_json(document)
        return
    table = Table(title=f"queues of {main_depth.name!r}")
    for column, justify in (
        ("queue", "left"),
        ("kind", "left"),
        ("messages", "right"),
        ("consumers", "right"),
    ):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for d in shown:
        if d.exists:
            table.add_row(d.name, d.kind, str(d.messages), str(d.consumers))
        else:
            table.add_row(d.name, d.kind, "missing", "-")
    Console().print(table)
