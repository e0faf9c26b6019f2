"""``rabbitq doctor`` without the management API (issue 25, item 5), the real command:
orphaned retry queues are found over AMQP as ``topology`` finds them, a queue of the
other type is explained as the worker explains it, and the broker's facts are marked
``info``, not ``ok``."""

from __future__ import annotations

import pytest

from tests.broker_node import free_port

from ..test_orphans import SERVICE, put, run

pytestmark = pytest.mark.broker


@pytest.fixture
async def service(tmp_path, uid, connection):
    (tmp_path / "service.py").write_text(SERVICE)
    queue = f"t.{uid}.docamqp"
    yield tmp_path, queue
    channel = await connection.channel()
    for suffix in ("", ".dlq", ".retry.1s", ".retry.2s", ".retry.10m"):
        await channel.queue_delete(queue + suffix)
    await channel.exchange_delete(queue)
    await channel.close()


def no_api() -> tuple[str, str]:
    return "--management-url", f"http://127.0.0.1:{free_port()}"


async def test_doctor_without_the_api_reports_the_orphans_topology_finds(
    service, broker_url, connection
):
    directory, queue = service
    code, _, err = await run(directory, "topology", "service:app", url=broker_url,
                             T_QUEUE=queue, T_DELAYS="1,600")  # fmt: skip
    assert code == 0, err
    await put(connection, f"{queue}.retry.10m")

    code, out, err = await run(directory, "doctor", "service:app", *no_api(), url=broker_url,
                               T_QUEUE=queue, T_DELAYS="2")  # fmt: skip

    assert code == 0, out + err
    lines = out.splitlines()
    (empty,) = [line for line in lines if f"{queue}.retry.1s" in line]
    (waiting,) = [line for line in lines if f"{queue}.retry.10m" in line]
    assert empty.startswith("info ") and "safe to delete" in empty
    assert waiting.startswith("WARN ") and "holds 1 message(s)" in waiting
    # besides the delay ladder's, shared by the vhost (docs/delays.md: an older
    # rabbitq.delay.deliver, delayed messages other tests left in the catch-all)
    ours = [line for line in lines if line.startswith("WARN ") and "rabbitq.delay." not in line]
    assert len(ours) in (1, 2), out
    assert not [line for line in lines if line.startswith("ok ")]  # a fact is not a verdict


@pytest.mark.parametrize(("existing", "wanted"), [("classic", "quorum"), ("quorum", "classic")])
async def test_doctor_explains_a_queue_of_the_other_type_as_the_worker_does(
    service, broker_url, existing, wanted
):
    directory, queue = service
    code, _, err = await run(directory, "topology", "service:app", url=broker_url,
                             T_QUEUE=queue, T_DELAYS="1", T_TYPE=existing)  # fmt: skip
    assert code == 0, err

    code, out, _ = await run(directory, "doctor", "service:app", *no_api(), url=broker_url,
                             T_QUEUE=queue, T_DELAYS="1", T_TYPE=wanted)  # fmt: skip

    assert code == 1
    said = f"queue {queue!r} exists as a {existing} queue, the app wants {wanted}"
    assert said in out
    assert "PRECONDITION_FAILED - inequivalent" not in out
