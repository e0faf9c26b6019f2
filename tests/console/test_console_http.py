"""Every page and action of the console over HTTP, against the real broker."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import orjson

from rabbitq import App, Message

from .broker import dead, depth, publish, take
from .conftest import TOKEN, act, csrf_of, result, sample, sign_in, snapshot_of


def fill(broker_url: str, app: App, count: int = 3, **kwargs: object) -> None:
    publish(
        broker_url,
        app.topology().dlq.name,
        [dead(app.queue, i, **kwargs) for i in range(count)],  # type: ignore[arg-type]
    )


def mixed(broker_url: str, app: App) -> None:
    """4 exhausted ValueErrors (one group), 2 permanent KeyErrors (another)."""
    publish(
        broker_url,
        app.topology().dlq.name,
        [dead(app.queue, i, error=f"ValueError: amount {i * 10} too large") for i in range(4)]
        + [
            dead(
                app.queue,
                100 + i,
                reason="permanent",
                type_name="t.b",
                error=f"KeyError: 'user {4711 + i}'",
            )
            for i in range(2)
        ],
    )


def test_the_overview_shows_each_queue_with_its_depth_and_a_dlq_chart(
    make_console, app, broker_url
):
    fill(broker_url, app, 2)
    client = make_console()
    sample(client)
    page = client.get("/")
    assert page.status_code == 200
    html = page.text
    for spec in app.topology().queues:
        assert spec.name in html
    assert f'data-dlq-count="{app.topology().dlq.name}">2<' in html
    assert "<svg" in html and "max 2" in html
    assert page.headers["content-security-policy"].startswith("default-src 'self'")


def test_the_dlq_page_groups_by_reason_and_fingerprint(make_console, app, broker_url):
    mixed(broker_url, app)
    client = make_console()
    html = client.get(f"/q/{app.queue}").text
    assert "ValueError: amount &lt;n&gt; too large" in html
    assert "KeyError: &#39;user &lt;n&gt;&#39;" in html
    assert "data-shown-count>6<" in html
    assert '<span class="count">4</span>' in html and '<span class="count">2</span>' in html
    assert "sample traceback" in html
    # Reading left the DLQ as it was.
    assert depth(broker_url, app.topology().dlq.name) == 6


def test_filters_select_as_the_cli_does_and_a_bad_one_says_why(make_console, app, broker_url):
    mixed(broker_url, app)
    client = make_console()
    assert "data-shown-count>2<" in client.get(f"/q/{app.queue}?reason=permanent").text
    assert "data-shown-count>2<" in client.get(f"/q/{app.queue}?type=t.b").text
    assert "data-shown-count>1<" in client.get(f"/q/{app.queue}?grep=4712").text
    assert "data-shown-count>6<" in client.get(f"/q/{app.queue}?since=1h").text
    assert "Nothing here" in client.get(f"/q/{app.queue}?until=2000-01-01").text
    bad = client.get(f"/q/{app.queue}?since=yesterday-ish")
    assert bad.status_code == 400 and "cannot read the time" in bad.text


def test_a_message_page_escapes_a_hostile_body_and_headers(make_console, app, broker_url):
    body = orjson.dumps({"x": "<script>alert(1)</script>", "y": "\x1b[31mred"})
    publish(
        broker_url,
        app.topology().dlq.name,
        [dead(app.queue, 1, body=body, error="ValueError: <img src=x onerror=alert(1)>")],
    )
    client = make_console()
    listing = client.get(f"/q/{app.queue}").text
    key = listing.split(f"/q/{app.topology().dlq.name}/m/")[1].split('"')[0]
    page = client.get(f"/q/{app.queue}/m/{key}")
    assert page.status_code == 200
    html = page.text
    assert "<script>alert" not in html and "<img src=x" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "\\u001b[31mred" in html and "\x1b" not in html
    assert "rabbitq-reason" in html and "rabbitq-failed-at" in html
    assert "Traceback (most recent call last)" in html
    assert client.get(f"/q/{app.queue}/m/{'0' * 24}").status_code == 404


def test_an_unknown_queue_is_404(make_console):
    assert make_console().get("/q/not-this-consoles-queue").status_code == 404


def test_actions_need_a_signed_in_session_a_csrf_token_and_the_same_origin(
    make_console, app, broker_url
):
    fill(broker_url, app, 2)
    client = make_console()
    html = client.get(f"/q/{app.queue}").text
    assert 'name="act"' not in html  # no action forms before signing in
    snapshot = snapshot_of(html)
    r = client.post(f"/q/{app.queue}/run", data={"snapshot": snapshot, "act": "purge:filter"})
    assert r.status_code == 403 and "sign in" in r.text
    assert client.post("/login", data={"token": "wrong"}).status_code == 403
    sign_in(client)
    html = client.get(f"/q/{app.queue}").text
    data = {"snapshot": snapshot_of(html), "act": "purge:filter"}
    r = client.post(f"/q/{app.queue}/run", data=data)
    assert r.status_code == 403 and "CSRF" in r.text
    r = client.post(f"/q/{app.queue}/run", data={**data, "csrf": "0" * 64})
    assert r.status_code == 403
    r = client.post(
        f"/q/{app.queue}/run",
        data={**data, "csrf": csrf_of(html)},
        headers={"origin": "http://evil.example"},
    )
    assert r.status_code == 403 and "another site" in r.text
    assert depth(broker_url, app.topology().dlq.name) == 2  # nothing was touched


def test_a_read_only_console_shows_no_actions_and_refuses_them(make_console, app, broker_url):
    fill(broker_url, app, 2)
    client = make_console(read_only=True)
    html = client.get(f"/q/{app.queue}").text
    assert 'name="act"' not in html and "read-only" in html
    sign_in(client)  # signing in works, acting does not
    r = client.post(
        f"/q/{app.queue}/run", data={"snapshot": snapshot_of(html), "act": "purge:filter"}
    )
    assert r.status_code == 403 and "read-only" in r.text
    assert depth(broker_url, app.topology().dlq.name) == 2


def test_replaying_a_group_moves_exactly_that_group(make_console, app, broker_url, caplog):
    caplog.set_level(logging.INFO, logger="rabbitq.console")
    mixed(broker_url, app)
    client = make_console()
    sign_in(client)
    html = client.get(f"/q/{app.queue}").text
    group = html.split('data-group="')[1].split('"')[0]  # the largest: the 4 ValueErrors
    confirm = client.post(
        f"/q/{app.queue}/confirm",
        data={"csrf": csrf_of(html), "snapshot": snapshot_of(html), "act": f"replay:group:{group}"},
    )
    assert "data-confirm-count>4<" in confirm.text
    job = act(client, html, app.queue, f"replay:group:{group}")
    assert result(job, "done") == 4 and result(job, "failed") == 0
    assert result(job, "duplicates") == 0 and result(job, "not-found") == 0
    moved = take(broker_url, app.queue)
    assert sorted(m.message_id for m in moved) == [f"m{i:05d}" for i in range(4)]
    assert all(m.headers["rabbitq-replayed"] == 1 for m in moved)
    left = take(broker_url, app.topology().dlq.name)
    assert sorted(m.message_id for m in left) == ["m00100", "m00101"]
    logged = caplog.text
    assert "action replay by tok-" in logged and TOKEN not in logged


def test_replaying_a_selection_to_another_queue(make_console, app, broker_url):
    fill(broker_url, app, 4)
    other = f"{app.queue}.other"
    publish(broker_url, "", [])  # nothing: just proves the helper tolerates an empty batch
    client = make_console()
    sign_in(client)
    html = client.get(f"/q/{app.queue}").text
    keys = [part.split('"')[0] for part in html.split('name="k" value="')[1:]]
    assert len(keys) == 4
    job = act(client, html, app.queue, "replay:selection", k=keys[:2], to=other)
    # The other queue does not exist: the copies fail, the originals stay.
    assert result(job, "failed") == 2 and result(job, "done") == 0
    assert depth(broker_url, app.topology().dlq.name) == 4
    html = client.get(f"/q/{app.queue}").text
    keys = [part.split('"')[0] for part in html.split('name="k" value="')[1:]]
    job = act(client, html, app.queue, "replay:selection", k=keys[1:3], to=app.queue)
    assert result(job, "done") == 2
    assert sorted(m.message_id for m in take(broker_url, app.queue)) == ["m00001", "m00002"]
    assert depth(broker_url, app.topology().dlq.name) == 2


def test_purging_a_filtered_view_leaves_what_the_filter_does_not_select(
    make_console, app, broker_url
):
    """Sidekiq's "Delete All" ignored the filter (sidekiq #3243, #5997): not here."""
    mixed(broker_url, app)
    client = make_console()
    sign_in(client)
    html = client.get(f"/q/{app.queue}?reason=permanent").text
    assert "data-shown-count>2<" in html
    job = act(client, html, app.queue, "purge:filter")
    assert result(job, "done") == 2
    left = take(broker_url, app.topology().dlq.name)
    assert sorted(m.message_id for m in left) == [f"m{i:05d}" for i in range(4)]


def test_a_message_that_arrives_after_the_page_was_drawn_is_not_purged(
    make_console, app, broker_url
):
    fill(broker_url, app, 3)
    client = make_console()
    sign_in(client)
    html = client.get(f"/q/{app.queue}").text
    assert "data-shown-count>3<" in html
    # Same type, reason and error shape: the filter would select it, the page did not show it.
    late = dead(app.queue, 7, failed_at=datetime.now(UTC) - timedelta(days=1))
    publish(broker_url, app.topology().dlq.name, [late])
    job = act(client, html, app.queue, "purge:filter")
    assert result(job, "done") == 3
    left = take(broker_url, app.topology().dlq.name)
    assert [m.message_id for m in left] == ["m00007"]


def test_a_copy_that_died_again_after_the_page_was_drawn_is_not_replayed_twice(
    make_console, app, broker_url
):
    """Same message_id, new failure: a different copy, so not the one that was shown."""
    fill(broker_url, app, 1)
    client = make_console()
    sign_in(client)
    html = client.get(f"/q/{app.queue}").text
    take(broker_url, app.topology().dlq.name)  # someone else took it...
    publish(broker_url, app.topology().dlq.name, [dead(app.queue, 0, error="ValueError: again")])
    job = act(client, html, app.queue, "replay:filter")
    assert result(job, "done") == 0 and result(job, "not-found") == 1
    assert depth(broker_url, app.topology().dlq.name) == 1


def test_one_message_can_be_replayed_from_its_page(make_console, app, broker_url):
    fill(broker_url, app, 3)
    client = make_console()
    sign_in(client)
    listing = client.get(f"/q/{app.queue}").text
    key = listing.split(f"/q/{app.topology().dlq.name}/m/")[2].split('"')[0]  # the second message
    page = client.get(f"/q/{app.queue}/m/{key}").text
    job = act(client, page, app.queue, "replay:one")
    assert result(job, "done") == 1
    assert [m.message_id for m in take(broker_url, app.queue)] == ["m00001"]
    assert depth(broker_url, app.topology().dlq.name) == 2


def test_exporting_a_group_writes_jsonl_and_leaves_the_dlq(make_console, app, broker_url):
    mixed(broker_url, app)
    client = make_console()
    sign_in(client)
    html = client.get(f"/q/{app.queue}?reason=permanent").text
    job = act(client, html, app.queue, "export:filter")
    assert result(job, "done") == 2
    link = job.split('href="/jobs/')[1].split('"')[0]
    download = client.get(f"/jobs/{link}")
    assert download.status_code == 200
    lines = [orjson.loads(line) for line in download.content.splitlines()]
    assert sorted(r["properties"]["message_id"] for r in lines) == ["m00100", "m00101"]
    assert depth(broker_url, app.topology().dlq.name) == 6


def test_a_stale_or_foreign_snapshot_is_refused(make_console, app, broker_url):
    fill(broker_url, app, 1)
    client = make_console()
    sign_in(client)
    html = client.get(f"/q/{app.queue}").text
    r = client.post(
        f"/q/{app.queue}/confirm",
        data={"csrf": csrf_of(html), "snapshot": "feedbeef", "act": "purge:filter"},
    )
    assert r.status_code == 409 and "reload" in r.text
    r = client.post(
        f"/q/{app.queue}/confirm",
        data={"csrf": csrf_of(html), "snapshot": snapshot_of(html), "act": "purge:group:nope"},
    )
    assert r.status_code == 400
    r = client.post(
        f"/q/{app.queue}/confirm",
        data={"csrf": csrf_of(html), "snapshot": snapshot_of(html), "act": "purge:selection"},
    )
    assert r.status_code == 400 and "nothing selected" in r.text
    assert depth(broker_url, app.topology().dlq.name) == 1


def test_no_page_shows_the_token_or_the_broker_password(make_console, app, broker_url):
    fill(broker_url, app, 1)
    client = make_console()
    sign_in(client)
    sample(client)
    pages = [client.get(p).text for p in ("/", f"/q/{app.queue}", "/login")]
    for html in pages:
        assert TOKEN not in html
        assert ":guest@" not in html
    assert "guest:***@" in pages[0]


def test_signing_out_ends_the_session(make_console, app, broker_url):
    client = make_console()
    sign_in(client)
    html = client.get("/").text
    assert "signed in (tok-" in html
    client.post("/logout", data={"csrf": csrf_of(html)})
    assert "sign in to act" in client.get("/").text


def test_a_job_page_for_an_unknown_job_is_404(make_console):
    assert make_console().get("/jobs/nope").status_code == 404


class _Receipt(Message, type="t.console.receipt.send"):
    to: str


def test_the_type_filter_suggests_a_type_of_the_apps_own_handlers(make_console, app, broker_url):
    @app.handler(_Receipt)
    async def send(msg: _Receipt) -> None:
        pass

    fill(broker_url, app, 1)
    client = make_console()
    html = client.get(f"/q/{app.queue}").text
    assert 'name="type" value="" placeholder="t.console.receipt.send"' in html
    assert "payment.capture" not in html
    bad = client.get(f"/q/{app.queue}?since=yesterday-ish")  # no target on an error page
    assert bad.status_code == 400 and 'placeholder="message.type"' in bad.text
