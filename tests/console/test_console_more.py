"""The rest of the console's routes: rates from a worker's /metrics, the busy page, a
message the broker dead-lettered itself, static files, downloads need a session."""

from __future__ import annotations

import asyncio
import http.server
import threading
from collections.abc import Iterator

import aio_pika
import pytest

from rabbitq import App

from .broker import _depth, dead, publish, run_async
from .conftest import act, sample, sign_in, state_of


class _Metrics(http.server.BaseHTTPRequestHandler):
    received = 100

    def do_GET(self) -> None:
        type(self).received += 50
        body = (
            "# TYPE rabbitq_messages_received_total counter\n"
            f'rabbitq_messages_received_total{{queue="{self.server.queue}",type="a"}} '  # type: ignore[attr-defined]
            f"{type(self).received}\n"
            "# TYPE rabbitq_messages_processed_total counter\n"
            f'rabbitq_messages_processed_total{{queue="{self.server.queue}",type="a",'  # type: ignore[attr-defined]
            f'outcome="success"}} {type(self).received - 10}\n'
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def metrics_server(app: App) -> Iterator[str]:
    server = http.server.HTTPServer(("127.0.0.1", 0), _Metrics)
    server.queue = app.queue  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()


def test_rates_in_and_out_come_from_a_workers_metrics(make_console, app, metrics_server):
    client = make_console()
    state_of(client).config.metrics_urls = [metrics_server, "http://127.0.0.1:9/metrics"]
    sample(client)
    sample(client)
    html = client.get("/").text
    assert "from the workers&#39; /metrics" in html or "from the workers' /metrics" in html
    assert '<th class="n">in</th>' in html
    assert "/s</td>" in html  # a rate, not "-"


def test_without_metrics_the_change_in_depth_is_shown(make_console, app, broker_url):
    client = make_console()
    sample(client)
    publish(broker_url, app.topology().dlq.name, [dead(app.queue, i) for i in range(3)])
    sample(client)
    html = client.get("/").text
    assert "from the change in depth" in html
    assert '<th class="n">in</th>' not in html


def test_a_page_asked_for_while_an_action_holds_the_dlq_says_it_is_busy(make_console, app):
    client = make_console()
    lock = state_of(client).lock(app.topology().dlq.name)
    assert client.portal is not None
    client.portal.call(lock.acquire)
    try:
        r = client.get(f"/q/{app.queue}")
        assert r.status_code == 503 and "is busy" in r.text
    finally:
        client.portal.call(lock.release)
    assert client.get(f"/q/{app.queue}").status_code == 200


async def _reject_into_dlq(url: str, app: App) -> None:
    """A message the broker dead-letters itself: rejected from the main queue, in the DLQ."""
    queue = app.queue
    conn = await aio_pika.connect(url)
    async with conn:
        channel = await conn.channel()
        await channel.default_exchange.publish(
            aio_pika.Message(b'{"x": 1}', message_id="rejected-1", type="t.a"), routing_key=queue
        )
        q = await channel.declare_queue(queue, passive=True)
        for _ in range(100):
            m = await q.get(fail=False)
            if m is not None:
                await m.reject(requeue=False)
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the message did not arrive")
        # the broker dead-letters it in its own time (a quorum queue: at-least-once)
        dlq = app.topology().dlq.name
        for _ in range(200):
            if await _depth(url, dlq) == 1:
                return
            await asyncio.sleep(0.05)
        raise AssertionError("the rejected message did not reach the DLQ")


def test_a_message_the_broker_dead_lettered_shows_its_history(make_console, app, broker_url):
    run_async(_reject_into_dlq(broker_url, app))
    client = make_console()
    html = client.get(f"/q/{app.queue}").text
    assert "broker:rejected" in html
    key = html.split(f"/q/{app.topology().dlq.name}/m/")[1].split('"')[0]
    page = client.get(f"/q/{app.queue}/m/{key}").text
    assert "Broker history (x-death)" in page and "rejected" in page
    assert app.queue in page


def test_static_files_and_the_sign_in_page_are_served(make_console):
    client = make_console()
    assert client.get("/static/console.css").status_code == 200
    assert client.get("/static/console.js").status_code == 200
    assert client.get("/static/favicon.svg").status_code == 200
    page = client.get("/login?next=//evil.example")
    assert page.status_code == 200 and 'value="/"' in page.text  # no open redirect


def test_an_export_downloads_only_for_a_signed_in_session(make_console, app, broker_url):
    publish(broker_url, app.topology().dlq.name, [dead(app.queue, 1)])
    client = make_console()
    sign_in(client)
    html = client.get(f"/q/{app.queue}").text
    job = act(client, html, app.queue, "export:filter")
    link = "/jobs/" + job.split('href="/jobs/')[1].split('"')[0]
    assert client.get(link).status_code == 200
    client.cookies.clear()
    assert client.get(link).status_code == 403


def test_on_a_quorum_dlq_reading_twice_keeps_the_keys_and_a_replay_moves_the_group(
    broker_url, uid, tmp_path
):
    """Each read of a quorum DLQ raises x-delivery-count: the keys must not change."""
    from starlette.testclient import TestClient

    from rabbitq.console import create_app
    from rabbitq.console.security import Guard
    from rabbitq.console.state import Config
    from rabbitq.console.targets import from_app

    from .broker import declare_app, delete_app, depth, take
    from .conftest import TOKEN

    service = App(queue=f"t.{uid}.quorum", exchange=f"t.{uid}.qx", url=broker_url)
    declare_app(broker_url, service)
    try:
        publish(broker_url, service.topology().dlq.name, [dead(service.queue, i) for i in range(3)])
        config = Config(
            targets=[from_app("q:app", service)],
            url=broker_url,
            guard=Guard(token=TOKEN),
            export_dir=tmp_path,
        )
        with TestClient(create_app(config, sample=False), base_url="http://127.0.0.1") as client:
            sign_in(client)
            first = client.get(f"/q/{service.queue}").text
            second = client.get(f"/q/{service.queue}").text
            keys = [p.split('"')[0] for p in first.split('name="k" value="')[1:]]
            assert keys == [p.split('"')[0] for p in second.split('name="k" value="')[1:]]
            job = act(client, first, service.queue, "replay:filter")  # the older page
            assert 'data-result="done">3<' in job
        assert depth(broker_url, service.topology().dlq.name) == 0
        assert len(take(broker_url, service.queue)) == 3
    finally:
        delete_app(broker_url, service)


async def _delete_queue(url: str, name: str) -> None:
    conn = await aio_pika.connect(url)
    async with conn:
        await (await conn.channel()).queue_delete(name)


def test_an_action_that_cannot_run_says_why_on_its_job_page(make_console, app, broker_url):
    publish(broker_url, app.topology().dlq.name, [dead(app.queue, 1)])
    client = make_console()
    sign_in(client)
    html = client.get(f"/q/{app.queue}").text
    run_async(_delete_queue(broker_url, app.topology().dlq.name))
    job = act(client, html, app.queue, "purge:filter")
    assert 'data-job-state="failed"' in job and "does not exist" in job
    assert ":guest@" not in job
