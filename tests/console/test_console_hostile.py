"""The console against a hostile page and hostile dead letters: DNS rebinding (a Host
header the console does not serve) and control characters in every field."""

from __future__ import annotations

import re

import aio_pika
import orjson

from rabbitq._amqp import headers as h
from rabbitq.console.security import host_allowed, host_name, served_hosts

from .broker import dead, publish
from .conftest import act, sign_in

ESC = "\x1b"


def test_a_page_asked_for_under_another_host_name_is_refused(make_console, app):
    """DNS rebinding: the attacker's name resolves to 127.0.0.1, so the browser sends
    the attacker's Host header with the console's port."""
    client = make_console()
    for path in ("/", f"/q/{app.queue}", "/login", "/static/console.css"):
        refused = client.get(path, headers={"host": "rebind.attacker.example:8080"})
        assert refused.status_code == 400, path
        assert "rebind.attacker.example" in refused.text and "--allowed-host" in refused.text
        assert len(refused.text) < 300
    assert client.get("/", headers={"host": "evil.example"}).status_code == 400
    assert (
        client.post("/login", data={"token": "x"}, headers={"host": "x.example"}).status_code == 400
    )
    for host in ("127.0.0.1:8080", "localhost:8080", "LOCALHOST", "[::1]:8080"):
        assert client.get("/", headers={"host": host}).status_code == 200, host


def test_an_allowed_host_is_served(make_console):
    client = make_console(allowed_hosts=("console.internal",))
    assert client.get("/", headers={"host": "console.internal:8080"}).status_code == 200
    assert client.get("/", headers={"host": "other.internal:8080"}).status_code == 400


def _hostile(queue: str) -> aio_pika.Message:
    """A dead letter with ESC in every field a producer or a handler can fill."""
    message = dead(
        queue,
        1,
        type_name=f"t.{ESC}[31mtype",
        error=f"ValueError: {ESC}[2J{ESC}]0;owned{ESC}\\ cleared",
        traceback=f"Traceback (most recent call last):\n  {ESC}[1mFile x\nValueError",
        message_id=f"id-{ESC}[5m-blink",
        body=orjson.dumps({"y": f"{ESC}[31mred"}),
    )
    assert message.headers is not None
    message.headers[f"x-{ESC}[7mkey"] = f"value {ESC}[0m"
    # written raw, as a hostile producer would (the worker's own headers are bounded)
    message.headers[h.ERROR] = f"ValueError: {ESC}[2J{ESC}]0;owned{ESC}\\ cleared"
    message.headers[h.QUEUE] = f"{queue}{ESC}[8m"
    message.correlation_id = f"corr-{ESC}[4m"
    message.app_id = f"app{ESC}c"
    return message


def test_control_characters_of_a_hostile_dead_letter_reach_no_page(make_console, app, broker_url):
    publish(broker_url, app.topology().dlq.name, [_hostile(app.queue)])
    client = make_console()
    sign_in(client)
    listing = client.get(f"/q/{app.queue}").text
    key = re.search(rf"/q/{re.escape(app.topology().dlq.name)}/m/([0-9a-f]+)", listing)
    group = re.search(r'data-group="([^"]+)"', listing)
    assert key and group
    pages = {
        "listing": listing,
        "group": client.get(f"/q/{app.queue}?group={group[1]}").text,
        "message": client.get(f"/q/{app.queue}/m/{key[1]}").text,
        "filtered": client.get(f"/q/{app.queue}?grep=cleared").text,
    }
    pages["job"] = act(client, pages["group"], app.queue, f"export:group:{group[1]}")
    found = {name: html.count(ESC) for name, html in pages.items() if ESC in html}
    assert not found, f"raw ESC bytes in the pages: {found}"
    assert "\\x1b[2J" in pages["listing"] and "\\x1b[31mred" in pages["message"].replace(
        "\\u001b", "\\x1b"
    )


def test_host_names_are_compared_without_port_case_or_brackets():
    assert host_name("Console.Example:8080") == "console.example"
    assert host_name("[::1]:8080") == "::1" and host_name("::1") == "::1"
    assert host_allowed("console.example.:80", ["console.example"])
    assert not host_allowed("console.example.evil:80", ["console.example"])
    assert not host_allowed(None, ["x"]) and not host_allowed("", ["x"])
    assert served_hosts("0.0.0.0", ("a.test",)) == ("a.test",)
    assert served_hosts("10.0.0.5", ()) == ("10.0.0.5",)


def test_the_refusal_shows_a_hostile_host_name_escaped(make_console):
    refused = make_console().get("/", headers={"host": "evil\x1b[2J.example"})
    assert refused.status_code == 400
    assert ESC not in refused.text and "\\x1b[2j" in refused.text  # names are lower-cased
