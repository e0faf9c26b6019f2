"""An encrypted app for the CLI tests: its queue, exchange and keys from the environment
(``CRYPTO_TEST_QUEUE``, ``CRYPTO_TEST_EXCHANGE``, ``CRYPTO_TEST_KEYS``)."""

from __future__ import annotations

import os

from rabbitq import App
from rabbitq.crypto import Keyring

app = App(
    queue=os.environ.get("CRYPTO_TEST_QUEUE", "crypto-test-unset"),
    exchange=os.environ.get("CRYPTO_TEST_EXCHANGE", "rabbitq"),
    encryption=Keyring.from_env("CRYPTO_TEST_KEYS", default="k0=" + "A" * 43 + "="),
)
