"""Server properties as RabbitMQ sends them in ``connection.start`` (as aiormq decodes
them), for tests of version-dependent behaviour without that broker.

``RABBITMQ_3_10_8`` was recorded from this machine's broker. No RabbitMQ 4.3 runs here:
``RABBITMQ_4_3_0`` has the same keys with the values a 4.3.0 node announces (version,
its Erlang/OTP 27 platform, Broadcom's copyright), from RabbitMQ's 4.3 release notes and
the capabilities every 3.x and 4.x broker lists.
"""

from __future__ import annotations

from typing import Any

_CAPABILITIES = {
    "publisher_confirms": True,
    "exchange_exchange_bindings": True,
    "basic.nack": True,
    "consumer_cancel_notify": True,
    "connection.blocked": True,
    "consumer_priorities": True,
    "authentication_failure_close": True,
    "per_consumer_qos": True,
    "direct_reply_to": True,
}

RABBITMQ_3_10_8: dict[str, Any] = {
    "capabilities": _CAPABILITIES,
    "cluster_name": "rabbit@vm",
    "copyright": "Copyright (c) 2007-2022 VMware, Inc. or its affiliates.",
    "information": "Licensed under the MPL 2.0. Website: https://rabbitmq.com",
    "platform": "Erlang/OTP 25.2.3",
    "product": "RabbitMQ",
    "version": "3.10.8",
}

RABBITMQ_4_3_0: dict[str, Any] = {
    "capabilities": _CAPABILITIES,
    "cluster_name": "rabbit@broker-0",
    "copyright": "Copyright (c) 2007-2026 Broadcom Inc and/or its subsidiaries",
    "information": "Licensed under the MPL 2.0. Website: https://rabbitmq.com",
    "platform": "Erlang/OTP 27.3.4",
    "product": "RabbitMQ",
    "version": "4.3.0",
}
