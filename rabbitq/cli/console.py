"""``rabbitq console``: serve the operator console (needs ``pip install 'rabbitq[console]'``)."""

from __future__ import annotations

import errno
import logging
import os
import socket
from pathlib import Path
from typing import Any

import click

from .._ops import logs
from ..loader import load_app
from ..settings import TLS, TLS_CA_ENV, TLS_CERT_ENV, TLS_KEY_ENV, resolve_url, url_password
from .common import friendly_errors, tls_options, url_option

TOKEN_ENV = "RABBITQ_CONSOLE_TOKEN"


def listen(bind: str, port: int) -> socket.socket:
    """A listening socket on ``bind``:``port`` (0 picks a free port), or a one-line error.

    Bound here rather than by uvicorn so that the address printed is the one in use."""
    family = socket.AF_INET6 if ":" in bind else socket.AF_INET
    try:
        return socket.create_server((bind, port), family=family)
    except OSError as exc:
        raise click.ClickException(
            f"cannot listen on {bind}:{port}: {os.strerror(exc.errno) if exc.errno else exc}"
            + ("; choose another with --port" if exc.errno == errno.EADDRINUSE else "")
        ) from None


@click.command()
@click.argument("specs", nargs=-1, required=True, metavar="MODULE:APP|QUEUE...")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8080,
    show_default=True,
    help="Port to listen on; 0 picks a free one (the address is printed at start).",
)
@click.option(
    "--bind",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on; anything but loopback exposes the console to the network.",
)
@click.option(
    "--token",
    envvar=TOKEN_ENV,
    show_envvar=True,
    default=None,
    help="Token that signs an operator in for actions; generated and printed once if absent.",
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    metavar="NAME",
    help="A host name (or address) browsers may use for the console besides localhost and "
    "the --bind address; requests naming any other are refused (repeatable).",
)
@click.option("--read-only", is_flag=True, help="Show queues and messages; disable every action.")
@click.option(
    "--metrics",
    "metrics_urls",
    multiple=True,
    metavar="URL",
    help="A worker's /metrics URL, for rates in and out (repeatable).",
)
@click.option(
    "--export-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("rabbitq-exports"),
    show_default=True,
    help="Where exports are written (and downloaded from).",
)
@url_option
@tls_options
@friendly_errors
def console(
    specs: tuple[str, ...],
    port: int,
    bind: str,
    token: str | None,
    allowed_hosts: tuple[str, ...],
    read_only: bool,
    metrics_urls: tuple[str, ...],
    export_dir: Path,
    url: str | None,
    tls: TLS | None,
) -> None:
    """Serve the operator web console: queue depths and rates, dead letters grouped by
    failure, and replay / export / purge of exactly what the page shows.

    Example: rabbitq console examples.payment_service:app --token "$TOKEN"
    """
    try:
        import uvicorn

        from ..console.security import Guard, new_token, served_hosts, token_id
        from ..console.server import create_app
        from ..console.serving import ConsoleServer, check_broker_sync
        from ..console.state import Config
        from ..console.targets import from_app, from_queue
    except ImportError as exc:  # the optional extra is missing
        raise click.ClickException(
            f"the console needs its extra: pip install 'rabbitq[console]' ({exc.name} missing)"
        ) from None

    if tls is not None:
        tls.context()  # a missing or unreadable file is a one-line error now, not later
        # Every connection the console opens (sampling, reads, replays) reads its TLS
        # files from these, so the options reach them all.
        for name, path in ((TLS_CA_ENV, tls.ca), (TLS_CERT_ENV, tls.cert), (TLS_KEY_ENV, tls.key)):
            if path:
                os.environ[name] = path
    targets = []
    outboxes: list[tuple[str, Any]] = []
    statuses: list[tuple[str, Any]] = []
    broker = url
    for spec in specs:
        if ":" in spec:
            app = load_app(spec)
            targets.append(from_app(spec, app))
            if app.outbox is not None:
                outboxes.append((spec, app.outbox))
            if app.status_writer is not None:
                statuses.append((spec, app))
            broker = broker or app.url
        else:
            targets.append(from_queue(spec))
    generated = token is None
    token = token or new_token()
    guard = Guard(token=token, read_only=read_only)
    config = Config(
        targets=targets,
        url=resolve_url(broker),
        guard=guard,
        export_dir=export_dir,
        metrics_urls=metrics_urls,
        outboxes=outboxes,
        statuses=statuses,
        allowed_hosts=served_hosts(bind, allowed_hosts),
    )
    # The root logger is the CLI's (WARNING): the console says at INFO what it does.
    logs.configure(level="INFO", secrets=[url_password(config.url) or ""])
    check_broker_sync(config.url)  # a refused login is one line now, not a page later
    sock = listen(bind, port)
    port = sock.getsockname()[1]
    where = f"http://{bind if ':' not in bind else f'[{bind}]'}:{port}/"
    click.echo(f"rabbitq console on {where} for {config.shown_url}")
    if read_only:
        click.echo("read-only: actions are disabled")
    elif generated:
        # Printed once, here; never logged. Logs name it by its id.
        click.echo(f"operator token ({token_id(token)}; set {TOKEN_ENV} to choose one): {token}")
    else:
        click.echo(f"operator token: {token_id(token)} (from --token or {TOKEN_ENV})")
    if bind not in ("127.0.0.1", "::1", "localhost"):
        click.echo(f"warning: listening on {bind}, not only on this machine", err=True)
        if not allowed_hosts:
            click.echo(
                "note: only requests for localhost"
                + ("" if bind in ("", "0.0.0.0", "::") else f" or {bind}")
                + " are served; add --allowed-host NAME for each name browsers use",
                err=True,
            )
    server = ConsoleServer(uvicorn.Config(create_app(config), log_level="warning"))
    server.run(sockets=[sock])
    logging.getLogger("rabbitq.console").info("console stopped")
