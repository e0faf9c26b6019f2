"""With encryption on, a marker placed in a message field and in the handler's
exception text appears nowhere a person without the key can read: every queue's raw
bodies and headers (main, retry, DLQ, and what the delay ladder carried: a delayed
message read where the ladder delivered it, unchanged but for the broker's ``x-death``,
since the ladder's levels are shared with every other test on the broker), the
exported DLQ file, the status and outbox tables, the worker's log at INFO. The handler,
``dlq show --app`` and the console's views (with the key) see it; without the key they
say "encrypted (key K)"."""

from __future__ import annotations

import logging
import os
import uuid
from pathlib import Path
from typing import Any

import psycopg

from rabbitq import Context, Message, PermanentError, RetryPolicy, Worker, dlq
from rabbitq.console.status_view import history_view
from rabbitq.console.views import message_sections
from rabbitq.crypto import KEY_ID, Keyring
from rabbitq.crypto.codec import cipher_of
from rabbitq.crypto.view import reveal
from rabbitq.effects import Outbox, PostgresStore
from tests.effects.conftest import drop_tables
from tests.helpers import Recorder, run_cli_async, running, wait_for

PG_URL = os.environ.get("RABBITQ_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
K1, K2 = Keyring.generate_key(), Keyring.generate_key()


class Pay(Message, type="test.crypto.pay"):
    card: str
    kind: str


class Receipt(Message, type="test.crypto.receipt"):
    card: str


def _dump(value: Any) -> bytes:
    """Everything a reader of the broker or a table gets, as bytes."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, dict):
        return b"|".join(_dump(k) + b"=" + _dump(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return b"|".join(_dump(v) for v in value)
    return str(value).encode()


async def _peek(connection: Any, names: list[str]) -> list[tuple[str, bytes, dict[str, Any]]]:
    """(message id, body, headers) of every message in ``names``, left where it was."""
    seen: list[tuple[str, bytes, dict[str, Any]]] = []
    channel = await connection.channel()
    try:
        for name in names:
            try:
                queue = await channel.declare_queue(name, passive=True)
            except Exception:
                channel = await connection.channel()
                continue
            held = []
            while (m := await queue.get(fail=False, no_ack=False)) is not None:
                seen.append((m.message_id or "", m.body, dict(m.headers or {})))
                held.append(m)
                if len(held) > 5000:
                    break
            for m in held:
                await m.nack(requeue=True)
    finally:
        await channel.close()
    return seen


async def test_a_marker_is_read_only_with_the_key(
    make_app, broker_url, connection, caplog, tmp_path: Path
):
    marker = f"MARK{uuid.uuid4().hex}"
    prefix = f"t_{uuid.uuid4().hex[:8]}_"
    store = PostgresStore(PG_URL, prefix=prefix, cleanup_interval=None)
    app = make_app(
        retry=RetryPolicy(delays=(30,)),
        status=store,
        encryption=Keyring({"k2": K2, "k1": K1}, current="k2"),
    )
    outbox = Outbox(PG_URL, app=app, prefix=prefix)
    cipher = cipher_of(app)
    assert cipher is not None
    seen: list[str] = []

    @app.handler(Pay)
    async def pay(msg: Pay, ctx: Context) -> None:
        seen.append(msg.card)
        if msg.kind == "follow":
            await ctx.publish(Receipt(card=msg.card))
            return
        if msg.kind == "dead":
            raise PermanentError(f"card {msg.card} refused")
        raise OSError(f"gateway lost {msg.card}")  # retried in 30 s: waits in the retry queue

    receipts: list[str] = []

    @app.handler(Receipt)
    async def receipt(msg: Receipt) -> None:
        receipts.append(msg.card)
        raise PermanentError(f"receipt {msg.card} bounced")

    recorder = Recorder()
    topology = app.topology()
    names = [q.name for q in topology.queues]
    try:
        caplog.set_level(logging.INFO)
        async with running(Worker(app, hooks=recorder)):
            async with app.publisher() as pub:
                dead = await pub.publish(Pay(card=marker, kind="dead"))
                await pub.publish(Pay(card=marker, kind="retry"))
                await pub.publish(Pay(card=marker, kind="follow"))
            await wait_for(lambda: recorder.count("dead_lettered") == 2, timeout=30)
            await wait_for(lambda: recorder.count("retried") == 1, timeout=30)
        # the main queue holds two more, published while no worker runs: one of them
        # through the delay ladder (1 s)
        async with app.publisher() as pub:
            await pub.publish(Pay(card=marker, kind="waiting"))
            delayed = await pub.publish(Pay(card=marker, kind="later"), delay=1)
        main = topology.main.name

        async def arrived() -> bool:  # counted, not read: each read is a delivery
            channel = await connection.channel()
            try:
                queue = await channel.declare_queue(main, passive=True)
                return queue.declaration_result.message_count == 2
            finally:
                await channel.close()

        await wait_for(arrived, timeout=60, interval=0.2)
        async with await psycopg.AsyncConnection.connect(PG_URL, autocommit=True) as conn:
            await outbox.publish(conn, Pay(card=marker, kind="outboxed"))
        assert seen.count(marker) == 3 and receipts == [marker]  # the handlers read it

        # -- nowhere in the broker ------------------------------------------------------
        everything = await _peek(connection, names)
        by_queue = {n: await _peek(connection, [n]) for n in names}
        kinds = {q.name: q.kind for q in topology.queues}
        counts = {kinds[n]: len(v) for n, v in by_queue.items() if v}
        assert counts == {"main": 2, "retry": 1, "dlq": 2}, counts
        for mid, body, headers in everything:
            assert marker.encode() not in body + _dump(headers), mid
        for mid, _, headers in everything:
            if mid in {dead, delayed}:
                assert headers[KEY_ID] == "k2"

        # -- the DLQ tools: export keeps ciphertext, show decrypts with --app --------------
        path = tmp_path / "dlq.jsonl"
        tally = await dlq.export(app.queue, path, url=broker_url)
        assert tally.done == 2
        assert marker.encode() not in path.read_bytes()
        env = {
            "CRYPTO_TEST_QUEUE": app.queue,
            "CRYPTO_TEST_EXCHANGE": app.exchange,
            "CRYPTO_TEST_KEYS": f"k2={K2},k1={K1}",
        }
        spec = "tests.integration.crypto.service:app"
        shown = await run_cli_async(
            "dlq", "show", app.queue, dead, "--app", spec, url=broker_url, env=env
        )
        assert shown.returncode == 0, shown.stderr
        assert marker in shown.stdout and "PermanentError" in shown.stdout
        blind = await run_cli_async("dlq", "show", app.queue, dead, url=broker_url, env=env)
        assert marker not in blind.stdout and "encrypted (key k2)" in blind.stdout
        listed = await run_cli_async("dlq", "list", app.queue, url=broker_url, columns=200)
        assert marker not in listed.stdout and "encrypted (key k2)" in listed.stdout
        counted = await run_cli_async("keys", "list", spec, url=broker_url, env=env)
        assert "k2: 2 message(s) (current)" in counted.stdout, counted.stdout
        checked = await run_cli_async("keys", "check", spec, url=broker_url, env=env)
        assert checked.returncode == 0, checked.stdout  # nothing under another key
        older = {**env, "CRYPTO_TEST_KEYS": f"k3={K1},k2={K2}"}  # k3 current now
        checked = await run_cli_async("keys", "check", spec, url=broker_url, env=older)
        assert checked.returncode == 1 and "k2: 2" in checked.stdout, checked.stdout

        # -- the console's views, with and without the key ---------------------------------
        dead_messages = await dlq.list_messages(app.queue, url=broker_url)
        with_key = message_sections(reveal(dead_messages[0], cipher))
        without = message_sections(reveal(dead_messages[0], None))
        assert marker in str(with_key) and marker not in str(without)
        assert "encrypted (key k2)" in str(without)

        # -- the status and outbox tables ---------------------------------------------------
        async with await psycopg.AsyncConnection.connect(PG_URL, autocommit=True) as conn:
            cur = await conn.execute(
                "SELECT tablename FROM pg_tables WHERE tablename LIKE %s", (prefix + "%",)
            )
            tables = [name for (name,) in await cur.fetchall()]
            assert {f"{prefix}status", f"{prefix}outbox"} <= set(tables), tables
            for table in tables:
                cur = await conn.execute(
                    psycopg.sql.SQL("SELECT * FROM {}").format(psycopg.sql.Identifier(table))
                )
                rows = await cur.fetchall()
                assert marker.encode() not in _dump(list(rows)), table
        status = await app.status(dead)
        assert status is not None and status.state == "dead_lettered"
        assert marker not in str(status.history)  # app.status() reads what is stored
        assert marker in str(history_view("svc", status, cipher))
        assert marker not in str(history_view("svc", status, None))
        shown_status = await run_cli_async("status", spec, dead, url=broker_url, env=env)
        # the CLI's app has no status store: its own error, never the marker
        assert marker not in shown_status.stdout + shown_status.stderr

        # -- the worker's log at INFO ------------------------------------------------------
        assert "dead-lettered" in caplog.text and "PermanentError" in caplog.text
        assert marker not in caplog.text
    finally:
        await outbox.close()
        await store.close()
        await drop_tables(prefix)


async def test_a_chain_s_later_steps_travel_encrypted(make_app, connection):
    from rabbitq import chain

    marker = f"MARK{uuid.uuid4().hex}"
    app = make_app(encryption=Keyring({"k2": K2}))
    receipts: list[str] = []

    @app.handler(Pay)
    async def pay(msg: Pay) -> None:
        pass

    @app.handler(Receipt)
    async def receipt(msg: Receipt) -> None:
        receipts.append(msg.card)

    topology = app.topology()
    async with running(Worker(app)):
        pass  # declared
    async with app.publisher() as pub:
        await pub.publish(chain(Pay(card="first", kind="ok"), Receipt(card=marker)))
    waiting = await _peek(connection, [topology.main.name])
    assert len(waiting) == 1
    _, body, headers = waiting[0]
    assert "rabbitq-chain" in headers and marker.encode() not in body + _dump(headers)
    async with running(Worker(app)):
        await wait_for(lambda: receipts == [marker], timeout=30)


async def test_an_encrypted_app_s_large_payload_is_ciphertext_in_its_blob_store(
    make_app, connection
):
    from rabbitq.payloads import PostgresBlobs

    marker = f"MARK{uuid.uuid4().hex}"
    prefix = f"t_{uuid.uuid4().hex[:8]}_"
    blobs = PostgresBlobs(PG_URL, above=1024, prefix=prefix)
    app = make_app(encryption=Keyring({"k2": K2}), large_payloads=blobs)
    seen: list[str] = []

    @app.handler(Pay)
    async def pay(msg: Pay) -> None:
        seen.append(msg.card)

    big = marker + "x" * 20_000
    try:
        async with running(Worker(app)):
            pass  # declared
        async with app.publisher() as pub:
            await pub.publish(Pay(card=big, kind="big"))
        waiting = await _peek(connection, [app.topology().main.name])
        assert len(waiting) == 1
        _, body, headers = waiting[0]
        assert len(body) < 1024 and marker.encode() not in body + _dump(headers)
        async with await psycopg.AsyncConnection.connect(PG_URL, autocommit=True) as conn:
            cur = await conn.execute(
                psycopg.sql.SQL("SELECT * FROM {}").format(psycopg.sql.Identifier(f"{prefix}blobs"))
            )
            rows = await cur.fetchall()
        assert rows and marker.encode() not in _dump(list(rows))  # the blob is ciphertext
        async with running(Worker(app)):
            await wait_for(lambda: seen == [big], timeout=30)
    finally:
        await blobs.close()
        await drop_tables(prefix)
