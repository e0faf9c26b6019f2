"""Publishing while the broker is down (a private node, stopped with ``stop_app``).

By default ``publish()`` fails at once with a clear error; with ``retry_for=S`` it
keeps trying for at most S seconds and returns only once the broker confirmed the
message. Never does it report success for a message the broker did not confirm.
"""

from __future__ import annotations

import asyncio

import pytest

from rabbitq import App, BrokerUnavailable, Message, PublishInterrupted

from ..helpers import declare_topology, delete_app_objects, drain_queue
from .harness import connect_admin

pytestmark = pytest.mark.slow


class Order(Message, type="chaos.publisher.order"):
    n: int


async def test_publish_while_the_broker_is_down_fails_or_waits_but_never_claims_success(
    chaos_node, uid
):
    app = App(queue=f"pub.{uid}", exchange=f"pub.{uid}.x", url=chaos_node.url)

    @app.handler(Order)
    async def order(msg: Order) -> None: ...

    admin = await connect_admin(chaos_node.url)
    await declare_topology(admin, app)
    try:
        async with (
            app.publisher() as plain,
            app.publisher(retry_for=0.5) as impatient,
            app.publisher(retry_for=30) as patient,
        ):
            await plain.publish(Order(n=0), message_id="before")
            await asyncio.to_thread(chaos_node.ctl, "stop_app")

            # default: fails at once, never claims success. It says nothing was sent, or,
            # when the client has not yet seen the node's close (stop_app returns before
            # the close frame arrives; seen under CI load), that it may have been stored.
            with pytest.raises(
                PublishInterrupted, match="not connected to RabbitMQ|may or may not have been"
            ):
                await plain.publish(Order(n=1), message_id="fail-fast")
            # a bounded retry that the outage outlasts: a clear error, no success
            with pytest.raises(PublishInterrupted, match=r"not confirmed within retry_for=0.5s"):
                await impatient.publish(Order(n=2), message_id="gave-up")
            # a new publisher cannot connect: a clear error at once by default
            with pytest.raises(BrokerUnavailable, match="cannot reach RabbitMQ"):
                async with app.publisher():
                    pass

            # these wait for the broker: one on an open publisher, one still connecting
            waiting = asyncio.create_task(patient.publish(Order(n=3), message_id="waited"))

            async def connect_then_publish() -> str:
                async with app.publisher(retry_for=30) as late:
                    return await late.publish(Order(n=4), message_id="connected-late")

            connecting = asyncio.create_task(connect_then_publish())
            await asyncio.sleep(1.0)
            assert not waiting.done() and not connecting.done()

            await asyncio.to_thread(chaos_node.ctl, "start_app")
            await asyncio.to_thread(chaos_node.await_startup)
            assert await asyncio.wait_for(waiting, 30) == "waited"
            assert await asyncio.wait_for(connecting, 30) == "connected-late"

        stored = [m.message_id for m in await drain_queue(admin, app.queue)]
        assert sorted(stored) == ["before", "connected-late", "waited"]
    finally:
        await asyncio.to_thread(chaos_node.ctl, "start_app")  # if the test failed half-way
        await asyncio.to_thread(chaos_node.await_startup)
        await delete_app_objects(admin, app)
        await admin.close()
