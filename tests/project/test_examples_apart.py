"""The examples keep to names of their own (issue 25, item 4): trying them neither
touches the README tutorial's queue nor the test suite's database, and the payment
example has a consumer of what its relay publishes (item 2)."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

from examples import email_service, payment_service

ROOT = Path(__file__).resolve().parents[2]


def tutorial_queue() -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Five-minute tutorial", 1)[1].split("\n## ", 1)[0]
    found = re.search(r'App\(queue="([^"]+)"', section)
    assert found is not None
    return found[1]


def test_the_examples_use_neither_the_tutorials_queue_nor_its_exchange():
    apps = [email_service.app, payment_service.app, payment_service.receipts]
    names = {q.name for app in apps for q in app.topology().queues}
    tutorial = tutorial_queue()
    assert not any(n == tutorial or n.startswith(tutorial + ".") for n in names)
    assert all(n.startswith("example-") for n in names)
    assert {app.exchange for app in apps} == {"examples"}


def test_the_payment_example_has_a_database_of_its_own():
    assert urlsplit(payment_service.DEFAULT_DB).path != "/test"  # the test suite's


def test_something_consumes_what_the_payment_examples_relay_publishes():
    receipts = payment_service.receipts
    assert "payment.captured" in receipts.topology().routing_keys
    assert receipts.exchange == payment_service.app.exchange
    readme = (ROOT / "examples/README.md").read_text()
    consumer = readme.index("rabbitq worker examples.payment_service:receipts")
    assert consumer < readme.index("rabbitq outbox relay examples.payment_service:app")
    assert "rabbitq topology examples.payment_service:app --delete" in readme
