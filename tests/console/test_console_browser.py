"""The console in a real headless Chromium (Debian's /usr/bin/chromium, driven by
Playwright; no browser download): load the overview, open a group, replay it, and see
the DLQ count drop.

Outside CI the test skips when Chromium or Playwright is missing; in CI (``CI`` set) that
is a failure. ``RABBITQ_CONSOLE_SCREENSHOTS=DIR`` also saves the pages it visits there.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from rabbitq.console.targets import from_app

from .broker import dead, depth, publish, take
from .conftest import TOKEN

CHROMIUM = "/usr/bin/chromium"


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"browser tests need it in CI: {reason}")
    pytest.skip(reason)


@pytest.fixture
def browser():
    if not Path(CHROMIUM).exists():
        _unavailable(f"{CHROMIUM} is missing (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("playwright is not installed (pip install playwright)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield b
        finally:
            b.close()


def test_an_operator_opens_a_group_replays_it_and_sees_the_dlq_count_drop(
    browser, app, broker_url, tmp_path
):
    shots = os.environ.get("RABBITQ_CONSOLE_SCREENSHOTS")
    dlq_name = app.topology().dlq.name
    publish(
        broker_url,
        dlq_name,
        [
            dead(app.queue, i, error=f"TimeoutError: gateway timed out after {30 + i}s")
            for i in range(3)
        ]
        + [
            dead(app.queue, 10 + i, reason="permanent", error=f"Declined: card {i} refused")
            for i in range(2)
        ],
    )
    from .server import serve

    with serve([from_app("svc:app", app)], broker_url, TOKEN, tmp_path) as base:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)

        # The overview shows 5 dead letters (once the sampler has run).
        count = page.locator(f'[data-dlq-count="{dlq_name}"]')
        page.goto(base + "/")
        for _ in range(40):
            if count.inner_text() == "5":
                break
            page.wait_for_timeout(250)
            page.reload()
        assert count.inner_text() == "5"

        # Sign in, then open the DLQ from the overview.
        page.goto(base + "/login?next=/")
        page.fill('input[name="token"]', TOKEN)
        page.click("form.login button")
        page.wait_for_url(base + "/")
        count.click()
        assert page.locator("[data-shown-count]").inner_text() == "5"

        # Open the largest group (the timeouts) and replay all of it.
        page.locator(".group-link").first.click()
        assert "group=" in page.url
        assert page.locator("[data-shown-count]").inner_text() == "3"
        page.locator('#actions .bulk button[value^="replay:group:"]').click()
        assert page.locator("[data-confirm-count]").inner_text() == "3"
        page.click("[data-confirm]")
        page.wait_for_selector('[data-job-state="done"]', timeout=30_000)
        assert page.locator('[data-result="done"]').inner_text() == "3"
        assert page.locator('[data-result="duplicates"]').inner_text() == "0"

        # Back on the overview the count drops to 2.
        page.goto(base + "/")
        for _ in range(40):
            if count.inner_text() == "2":
                break
            page.wait_for_timeout(250)
            page.reload()
        assert count.inner_text() == "2"
        assert not errors, errors  # no JavaScript errors, no CSP violations
        if shots:
            page.screenshot(path=str(Path(shots) / "browser-overview.png"), full_page=True)

    assert depth(broker_url, dlq_name) == 2
    moved = take(broker_url, app.queue)
    assert sorted(m.message_id for m in moved) == ["m00000", "m00001", "m00002"]
    assert all(
        re.match(r"Declined", m.headers["rabbitq-error"]) for m in take(broker_url, dlq_name)
    )


def test_every_reading_page_works_without_javascript(browser, app, broker_url, tmp_path):
    dlq_name = app.topology().dlq.name
    publish(broker_url, dlq_name, [dead(app.queue, i) for i in range(2)])
    from .server import serve

    with serve([from_app("svc:app", app)], broker_url, TOKEN, tmp_path) as base:
        context = browser.new_context(java_script_enabled=False)
        page = context.new_page()
        page.goto(base + "/")
        page.click(f'[data-dlq-count="{dlq_name}"]')
        assert page.locator("[data-shown-count]").inner_text() == "2"
        page.fill('input[name="grep"]', "failure 1")
        page.click("form.filters button")
        assert page.locator("[data-shown-count]").inner_text() == "1"
        page.locator(".group-link").first.click()
        page.locator("table.messages a").first.click()
        assert "failure 1" in page.locator("dl.facts").inner_text()
        context.close()
