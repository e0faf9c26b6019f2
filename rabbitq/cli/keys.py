"""``rabbitq keys``: make a key, count the keys an app's DLQ is under, and move the DLQ
under the current key (docs/privacy.md, "Rotation")."""

from __future__ import annotations

import sys
from typing import Any

import click

from .. import dlq as ops
from ..crypto.codec import Cipher, cipher_of
from ..crypto.keyring import Keyring
from ..crypto.rewrap import CLEAR, count_keys, rewrap
from ..errors import ConfigurationError
from ..loader import load_app
from ..settings import TLS
from .common import friendly_errors, json_option, print_json, tls_options, url_option
from .dlq_options import finish, report_interruption, run_call


def _cipher(app_spec: str) -> tuple[Any, Cipher]:
    app = load_app(app_spec)
    cipher = cipher_of(app)
    if cipher is None:
        raise ConfigurationError(f"{app_spec} is not encrypted: App(encryption=Keyring(...))")
    return app, cipher


@click.group()
def keys() -> None:
    """Keys of encrypted apps (App(encryption=Keyring(...))): generate one, see which
    keys the DLQ's messages are under, move them under the current key."""


@keys.command()
@click.option("--id", "key_id", metavar="ID", help="Print it as ID=KEY, as $RABBITQ_KEYS takes.")
@json_option
def generate(key_id: str | None, as_json: bool) -> None:
    """Print a new random 256-bit AES key (URL-safe base64).

    \b
    Example:
      export RABBITQ_KEYS="k2=$(rabbitq keys generate),$RABBITQ_KEYS"
    """
    key = Keyring.generate_key()
    if as_json:
        print_json({"id": key_id, "key": key})
        return
    click.echo(f"{key_id}={key}" if key_id else key)


def _counts(app_spec: str, url: str | None, tls: TLS | None) -> tuple[Any, Cipher, dict[str, int]]:
    app, cipher = _cipher(app_spec)
    queue, url = app.topology().dlq.name, app.resolved_url(url)
    found = run_call(url, tls, lambda c: ops.list_messages(queue, url=url, connection=c))
    return app, cipher, dict(sorted(count_keys(found).items()))


@keys.command("list")
@click.argument("app_spec", metavar="MODULE:APP")
@json_option
@url_option
@tls_options
@friendly_errors
def list_(app_spec: str, as_json: bool, url: str | None, tls: TLS | None) -> None:
    """Count the app's DLQ messages per key id (a message whose error is under another
    key than its body counts for both; "(clear)": not encrypted). The DLQ is left as it
    was. An id not in the app's ring is marked "unknown": those messages stay
    undecryptable until the key is added back.
    """
    _app, cipher, counts = _counts(app_spec, url, tls)
    ring = cipher.keyring
    if as_json:
        print_json({"current": ring.current, "ring": list(ring.ids), "dlq": counts})
        return
    click.echo(f"key ring: {', '.join(ring.ids)} (current {ring.current})")
    if not counts:
        click.echo("the DLQ is empty")
    for key_id, n in counts.items():
        mark = "" if key_id == CLEAR else _mark(key_id, ring)
        click.echo(f"{key_id}: {n} message(s){mark}")


def _mark(key_id: str, ring: Keyring) -> str:
    if key_id == ring.current:
        return " (current)"
    return " (in the ring: 'rabbitq keys rewrap' moves them)" if ring.key(key_id) else " (unknown)"


@keys.command()
@click.argument("app_spec", metavar="MODULE:APP")
@json_option
@url_option
@tls_options
@friendly_errors
def check(app_spec: str, as_json: bool, url: str | None, tls: TLS | None) -> None:
    """Exit 1 if any DLQ message is under a key other than the current one (retiring
    an old key would leave it undecryptable), else 0; prints the counts as list does."""
    _app, cipher, counts = _counts(app_spec, url, tls)
    old = {k: n for k, n in counts.items() if k not in (CLEAR, cipher.keyring.current)}
    if as_json:
        print_json({"current": cipher.keyring.current, "other_keys": old})
    elif old:
        shown = ", ".join(f"{k}: {n}" for k, n in old.items())
        click.echo(f"DLQ messages under other keys than {cipher.keyring.current}: {shown}")
    else:
        click.echo(f"every encrypted DLQ message is under {cipher.keyring.current}")
    sys.exit(1 if old else 0)


@keys.command("rewrap")
@click.argument("app_spec", metavar="MODULE:APP")
@json_option
@url_option
@tls_options
@friendly_errors
@report_interruption
def rewrap_(app_spec: str, as_json: bool, url: str | None, tls: TLS | None) -> None:
    """Move the app's DLQ messages under older keys under the current key: each is
    decrypted, encrypted again (body, error, traceback), copied back to the DLQ with a
    confirm, and only then acked (as replay moves). Messages already under the current
    key, or in clear, stay; one under a key the ring lacks stays and is counted as
    failed (exit 1). Run it after the last message under the old key left the main,
    retry and delay queues (they are read by workers that hold the ring); then
    'rabbitq keys check' says whether the old key can go.
    """
    app, cipher = _cipher(app_spec)
    queue, url = app.topology().dlq.name, app.resolved_url(url)
    tally = run_call(url, tls, lambda c: rewrap(queue, cipher, url=url, connection=c))
    finish(tally, as_json)
    if tally.failed:
        sys.exit(1)
