"""The counted workflow proof at a reduced size (``python -m tests.chaos.workflow_proof
--chords 1000`` runs it at full size): chords under kill -9, duplicates and first-attempt
failures; a chain resumed by a replay. Worker processes are killed on the shared broker."""

from __future__ import annotations

import pytest

from tests.chaos.workflow_proof import prove

# The proof's own 120 s limit reports what was left; the test's limit must not cut it short.
pytestmark = [pytest.mark.broker, pytest.mark.slow, pytest.mark.timeout(240)]


async def test_every_chord_callback_once_after_its_members_and_none_lost_under_kill_9(
    broker_url,
):
    f = await prove(
        broker_url=broker_url, chords=40, kills=3, workers=2, timeout=120, mode="postgres"
    )
    print("\n" + f.line())
    assert f.kills >= 1
    assert f.callbacks == f.chords and f.members_lost == 0 and f.dlq == 0
    assert f.early == 0 and f.bad_results == 0
    assert set(f.runs) == {1}  # its handler ran once (its effect and done mark: one commit)
    # Each callback is on the wire once, but for a worker killed between the callback's
    # confirm and its "sent" mark: a second copy, the same message_id (see docs).
    assert sum(n * k for n, k in f.copies.items()) <= f.chords + f.kills
    assert f.chain == [1, 2, 3, 4, 5]  # resumed at step 3 after the replay, each once
