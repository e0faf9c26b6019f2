"""``rabbitq keys``: generate a key; an app without encryption is a one-line error
before anything connects."""

from __future__ import annotations

import base64

from rabbitq.crypto import Keyring
from tests.helpers import assert_one_line_error, run_cli


def test_generate_prints_a_key_the_ring_takes():
    out = run_cli("keys", "generate")
    assert out.returncode == 0, out.stderr
    key = out.stdout.strip()
    assert len(base64.urlsafe_b64decode(key)) == 32
    ring = run_cli("keys", "generate", "--id", "k3").stdout.strip()
    assert ring.startswith("k3=") and Keyring.parse(ring).ids == ("k3",)


def test_an_app_without_encryption_is_a_one_line_error():
    for command in ("list", "check", "rewrap"):
        out = run_cli("keys", command, "examples.email_service:app")
        line = assert_one_line_error(out)
        assert "is not encrypted: App(encryption=Keyring(...))" in line
