"""Fixtures for the console: an app with its own queues, a console for it, a client."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the console's extra: pip install 'rabbitq[console]'")

from starlette.testclient import TestClient

from rabbitq import App
from rabbitq.console import create_app
from rabbitq.console.security import Guard
from rabbitq.console.state import Config, State
from rabbitq.console.targets import from_app

from ..failure_kinds import SettleTimeout
from .broker import declare_app, delete_app

TOKEN = "test-token-0123456789"
CSRF = re.compile(r'name="csrf" value="([0-9a-f]+)"')
SNAPSHOT = re.compile(r'name="snapshot" value="([0-9a-f]+)"')


@pytest.fixture
def app(broker_url: str, uid: str) -> Iterator[App]:
    """A service with its own queues (classic: quick to create and delete)."""
    service = App(queue=f"t.{uid}.con", exchange=f"t.{uid}.x", url=broker_url, queue_type="classic")
    declare_app(broker_url, service)
    try:
        yield service
    finally:
        delete_app(broker_url, service)


@pytest.fixture
def make_console(broker_url: str, app: App, tmp_path: Path) -> Iterator[Callable[..., TestClient]]:
    """``make_console(read_only=False, allowed_hosts=())``: a TestClient on a console for
    ``app`` (served on 127.0.0.1:8080)."""
    clients: list[TestClient] = []

    def make(*, read_only: bool = False, allowed_hosts: tuple[str, ...] = ()) -> TestClient:
        config = Config(
            allowed_hosts=allowed_hosts,
            targets=[from_app("svc:app", app)],
            url=broker_url,
            guard=Guard(token=TOKEN, read_only=read_only),
            export_dir=tmp_path / "exports",
        )
        client = TestClient(create_app(config, sample=False), base_url="http://127.0.0.1:8080")
        client.__enter__()
        clients.append(client)
        return client

    try:
        yield make
    finally:
        for client in clients:
            client.__exit__(None, None, None)


def state_of(client: TestClient) -> State:
    """The console's state behind ``client``."""
    state: State = client.app.state.console  # type: ignore[attr-defined]
    return state


def sample(client: TestClient) -> None:
    """One depth sample, on the console's own loop."""
    assert client.portal is not None
    client.portal.call(state_of(client).sample_once)


def sign_in(client: TestClient) -> None:
    """Sign in with the token."""
    r = client.post("/login", data={"token": TOKEN, "next": "/"}, follow_redirects=False)
    assert r.status_code == 303, r.text


def csrf_of(html: str) -> str:
    """The CSRF token in a page's forms."""
    match = CSRF.search(html)
    assert match, "no CSRF token on the page"
    return match[1]


def snapshot_of(html: str) -> str:
    """The snapshot id of a page's action form."""
    match = SNAPSHOT.search(html)
    assert match, "no action form on the page"
    return match[1]


def act(client: TestClient, page_html: str, queue: str, act: str, **extra: Any) -> str:
    """Confirm and run an action from a drawn page; the finished job's HTML."""
    data: dict[str, Any] = {"csrf": csrf_of(page_html), "snapshot": snapshot_of(page_html)}
    data.update(act=act, **extra)
    confirm = client.post(f"/q/{queue}/confirm", data=data)
    assert confirm.status_code == 200, confirm.text
    run = client.post(f"/q/{queue}/run", data=data, follow_redirects=False)
    assert run.status_code == 303, run.text
    return wait_job(client, run.headers["location"])


def wait_job(client: TestClient, location: str, timeout: float = 30) -> str:
    """Poll a job page until the job is done."""
    deadline = time.monotonic() + timeout
    while True:
        page = client.get(location).text
        if 'data-job-state="running"' not in page:
            return page
        if time.monotonic() >= deadline:
            raise SettleTimeout(f"the job at {location} to finish", timeout)
        time.sleep(0.1)


def result(page: str, name: str) -> int:
    """A number from a job's result table."""
    match = re.search(rf'data-result="{name}">(\d+)<', page)
    assert match, f"no {name} on the job page"
    return int(match[1])
