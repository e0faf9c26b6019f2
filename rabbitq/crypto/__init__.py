"""Encrypted payloads: ``App(encryption=Keyring({...}, current="k2"))`` (docs/privacy.md).

:class:`Keyring` holds the keys by id (:mod:`.keyring`, pure); :mod:`.codec` encrypts and
authenticates with AES-GCM (the ``encryption`` extra: ``cryptography``); :mod:`.stages`
is the app's ``encrypt`` publish step and ``decrypt`` delivery stage.
"""

from .codec import KEY_ID, Undecryptable
from .keyring import Keyring

__all__ = ["KEY_ID", "Keyring", "Undecryptable"]
