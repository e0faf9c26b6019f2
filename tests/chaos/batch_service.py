"""The batch proof's service (tests/chaos/batch_proof.py): a batch handler with partial
failures, run as a worker process that can be killed with ``kill -9``.

    python -m tests.chaos.batch_service --url URL --queue Q --exchange X --prefix P \
        --ledger FILE --events FILE

Each message a batch succeeded on is one ``seq attempt pid`` line in the ledger (its
effect), written before the handler returns, one write per batch. Failures are a pure
function of the message and its attempt, so a message run again after a kill fails or
succeeds as it did: 1 in 50 is dead-lettered by the batch (``permanent``), 1 in 10
attempts is retried by the batch, and a batch holding a message whose attempt draws 1
in 1000 raises as a whole. The worker's hooks write one line per batch handed over
(``F size trigger``) and per duplicate acked without running (``D``) to the events file.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os

from rabbitq import App, BatchContext, BatchResult, Hooks, Message, RetryPolicy, Worker
from rabbitq.effects import RedisStore

REDIS = os.environ.get("RABBITQ_TEST_REDIS", "redis://127.0.0.1:6379/0")
MAX_SIZE = 100
MAX_WAIT = 0.2
PREFETCH = 2 * MAX_SIZE  # one batch fills while the last one runs
TIMEOUT = 3.0  # per batch; a killed worker's keys are free again 8 s later (timeout + 5 s)
PROVIDER_CALL = 0.02  # seconds per batch, as a bulk API call would take


class Item(Message, type="chaos.batch.item"):
    seq: int


def draw(seq: int, attempt: int) -> int:
    """A number 0-999 fixed by the message and its attempt."""
    digest = hashlib.blake2b(f"{seq}:{attempt}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") % 1000


def dead(seq: int) -> bool:
    return seq % 50 == 0


def retried(seq: int, attempt: int) -> bool:
    return draw(seq, attempt) < 100


def breaks_batch(seq: int, attempt: int) -> bool:
    return draw(seq, attempt) == 999


def build_app(url: str, queue: str, exchange: str, prefix: str, ledger: str) -> App:
    store = RedisStore(REDIS, key_prefix=prefix)
    app = App(
        queue=queue,
        exchange=exchange,
        url=url,
        prefetch=PREFETCH,
        timeout=TIMEOUT,
        retry=RetryPolicy(delays=(0.2, 0.5)),  # 3 attempts
        idempotency=store,
    )
    fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    pid = os.getpid()

    @app.batch_handler(Item, max_size=MAX_SIZE, max_wait=MAX_WAIT, key=lambda m: m.seq)
    async def handle(msgs: list[Item], ctx: BatchContext) -> BatchResult:
        attempts = [c.attempt for c in ctx.contexts]
        if any(breaks_batch(m.seq, a) for m, a in zip(msgs, attempts, strict=True)):
            raise RuntimeError("the provider refused the whole batch")
        await asyncio.sleep(PROVIDER_CALL)
        result = BatchResult()
        lines = []
        for i, (m, a) in enumerate(zip(msgs, attempts, strict=True)):
            if dead(m.seq):
                result.dead_letter(i, "refused for good")
            elif retried(m.seq, a):
                result.retry(i, "throttled")
            else:
                lines.append(f"{m.seq} {a} {pid}\n")
        if lines:
            os.write(fd, "".join(lines).encode())  # the batch's effect, one write
        return result

    return app


class EventFile(Hooks):
    """One line per batch handed over and per duplicate, written at once (kill -9)."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def batch_flushed(self, queue: str, type_name: str, size: int, trigger: str) -> None:
        os.write(self.fd, f"F {size} {trigger}\n".encode())

    def duplicate(self, queue: str, type_name: str) -> None:
        os.write(self.fd, b"D\n")


async def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--url", "--queue", "--exchange", "--prefix", "--ledger", "--events"):
        parser.add_argument(name, required=True)
    args = parser.parse_args()
    app = build_app(args.url, args.queue, args.exchange, args.prefix, args.ledger)
    worker = Worker(app, hooks=EventFile(args.events), grace_period=10)
    await worker.run(install_signal_handlers=True)


if __name__ == "__main__":
    asyncio.run(main())
