"""Encrypted payloads: ``App(encryption=Keyring({...}, current="k2"))`` (docs/privacy.md).

:class:`Keyring` holds the keys by id (:mod:`.keyring`, pure); :mod:`.codec` encrypts and
authenticates with AES-GCM (the ``encryption`` extra: ``cryptography``); :mod:`.stages`
is the app's ``encrypt`` publish step and ``decrypt`` delivery stage.
"""

from .codec import KEY_ID, Undecryptable
from .keyring import Keyring

# For App only (App.result, App(encryption=...)), not public (not in __all__):
from .results import read_result as read_result
from .stages import encrypted as encrypted

__all__ = ["KEY_ID", "Keyring", "Undecryptable"]
