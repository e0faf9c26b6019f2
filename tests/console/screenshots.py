"""Draw docs/console/*.png: the console's main pages in headless Chromium.

    .venv/bin/python -m tests.console.screenshots [OUT_DIR]

It declares two throwaway services (``billing`` and ``notifications`` on the exchange
``console-screens``) on the local broker, fills their DLQs with realistic dead letters,
and deletes everything at the end. The DLQ-depth chart needs an hour of samples, which a
screenshot run does not have: the samples of the last hour are *injected* (a rising DLQ),
and only the chart's history is made up this way; every other figure is read live.
"""

from __future__ import annotations

import math
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
from playwright.sync_api import sync_playwright

from rabbitq import App, RetryPolicy
from rabbitq.console.history import Sample
from rabbitq.console.targets import from_app

from .broker import dead, declare_app, delete_app, publish
from .server import serve

URL = "amqp://guest:guest@127.0.0.1:5672/"
TOKEN = "screenshot-token"
TB = """Traceback (most recent call last):
  File "/srv/billing/rabbitq/dispatch.py", line 141, in run
    await handler(msg, ctx)
  File "/srv/billing/billing/handlers.py", line 58, in capture
    result = await gateway.capture(msg.payment_id, msg.amount, idempotency_key=ctx.message_id)
  File "/srv/billing/billing/gateway.py", line 112, in capture
    raise {exc}
{line}"""


def fill(billing: App, notifications: App) -> None:
    now = datetime.now(UTC)
    out = []
    for i in range(14):
        pid = uuid.uuid4()
        line = f"TimeoutError: gateway did not answer within 10s (payment {pid})"
        out.append(
            dead(
                billing.queue,
                i,
                type_name="payment.capture",
                error=line,
                traceback=TB.format(exc="TimeoutError(...)", line=line),
                failed_at=now - timedelta(minutes=55 - 3 * i),
                message_id=uuid.uuid4().hex,
                body=orjson.dumps(
                    {"payment_id": str(pid), "amount": f"{19 + i}.90", "currency": "EUR"}
                ),
            )
        )
    for i in range(6):
        line = f"Declined: card ending {4000 + 37 * i} declined by issuer (code 51)"
        out.append(
            dead(
                billing.queue,
                100 + i,
                type_name="payment.capture",
                reason="permanent",
                error=line,
                traceback=TB.format(exc="Declined(...)", line=line),
                failed_at=now - timedelta(minutes=40 - 6 * i),
                message_id=uuid.uuid4().hex,
                body=orjson.dumps(
                    {
                        "payment_id": str(uuid.uuid4()),
                        "amount": "120.00",
                        "currency": "EUR",
                        "note": "<script>alert('hi')</script>",
                    }
                ),
            )
        )
    for i in range(3):
        out.append(
            dead(
                billing.queue,
                200 + i,
                type_name="payment.refund",
                reason="invalid",
                error="ValidationError: 1 validation error for Refund; amount: Input should be "
                "a valid decimal",
                traceback=None,
                failed_at=now - timedelta(minutes=20 - i),
                message_id=uuid.uuid4().hex,
                body=b'{"payment_id": "p-17", "amount": 12.5e400}',
            )
        )
    publish(URL, billing.topology().dlq.name, out)
    publish(
        URL,
        notifications.topology().dlq.name,
        [
            dead(
                notifications.queue,
                300 + i,
                type_name="email.send",
                error="SMTPServerDisconnected: Connection unexpectedly closed",
                failed_at=now - timedelta(minutes=12 - i),
                message_id=uuid.uuid4().hex,
                body=orjson.dumps({"to": f"user{i}@example.com", "subject": "Your receipt"}),
            )
            for i in range(2)
        ],
    )


def inject_history(state, services) -> None:  # type: ignore[no-untyped-def]
    """An hour of made-up DLQ depths ending at the live ones (see the module docstring)."""
    now = time.time()
    live = state.history.latest
    samples = []
    for step in range(120, 0, -1):
        at = now - step * 30
        depths = dict(live.depths)
        for app in services:
            name = app.topology().dlq.name
            final = live.depths.get(name, 0)
            progress = (120 - step) / 120
            depths[name] = round(final * (1 - math.exp(-3 * progress)) / (1 - math.exp(-3)))
        samples.append(Sample(at=at, depths=depths, consumers=live.consumers))
    state.history.samples.extendleft(reversed(samples))


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    billing = App(
        queue="billing",
        exchange="console-screens",
        url=URL,
        retry=RetryPolicy(delays=(10, 60, 600)),
    )
    notifications = App(
        queue="notifications",
        exchange="console-screens",
        url=URL,
        retry=RetryPolicy(delays=(5, 300)),
    )
    services = (billing, notifications)
    for app in services:
        declare_app(URL, app)
    try:
        fill(billing, notifications)
        targets = [
            from_app("billing.service:app", billing),
            from_app("notifications.service:app", notifications),
        ]
        with (
            tempfile.TemporaryDirectory() as tmp,
            serve(targets, URL, TOKEN, Path(tmp), sample_interval=1.0) as base,
            sync_playwright() as p,
        ):
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1280, "height": 820})
            page.goto(base + "/login?next=/")
            page.fill('input[name="token"]', TOKEN)
            page.click("form.login button")
            time.sleep(1.5)
            from .server import last_app  # the app object the server runs

            inject_history(last_app().state.console, services)
            page.goto(base + "/")
            page.screenshot(path=str(out / "overview.png"), full_page=True)
            page.goto(base + "/q/billing")
            page.set_viewport_size({"width": 1280, "height": 1000})
            page.screenshot(path=str(out / "dead-letters.png"))
            page.set_viewport_size({"width": 1280, "height": 820})
            page.locator(".group-link").nth(1).click()
            page.locator("details summary").first.click()
            page.screenshot(path=str(out / "group.png"), full_page=True)
            page.locator("table.messages a").first.click()
            page.screenshot(path=str(out / "message.png"), full_page=True)
            page.goto(base + "/q/billing")
            page.locator(".group-link").first.click()
            page.locator('#actions .bulk button[value^="replay:group:"]').click()
            page.set_viewport_size({"width": 1280, "height": 330})
            page.screenshot(path=str(out / "confirm.png"))
            page.click("[data-confirm]")
            page.wait_for_selector('[data-job-state="done"]')
            page.set_viewport_size({"width": 1280, "height": 480})
            page.screenshot(path=str(out / "result.png"))
            browser.close()
    finally:
        for app in services:
            delete_app(URL, app)


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/console"))
