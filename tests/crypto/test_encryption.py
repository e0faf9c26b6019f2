"""The key ring, the cipher, the encrypt step and the decrypt stage, without a broker."""

from __future__ import annotations

import base64
import logging
import uuid

import pytest

from rabbitq import App, Message
from rabbitq._amqp import headers as h
from rabbitq._amqp.properties import new as new_properties
from rabbitq.crypto import KEY_ID, Keyring, Undecryptable
from rabbitq.crypto.codec import Cipher, cipher_of, described, shown_text
from rabbitq.crypto.stages import MAX_SEALED_ERROR, seal_error
from rabbitq.errors import ConfigurationError, missing
from rabbitq.message import encode
from rabbitq.testing import deliver

K1, K2 = Keyring.generate_key(), Keyring.generate_key()
MARKER = "card-4111-marker"


class Pay(Message):
    __rabbitq_type__ = "crypto.pay"
    card: str


def _app(keys: dict[str, str] | None = None, current: str = "k2") -> App:
    app = App(
        queue=f"crypto-{uuid.uuid4().hex[:8]}",
        encryption=Keyring(keys or {"k2": K2, "k1": K1}, current=current),
    )

    @app.handler(Pay)
    async def pay(msg: Pay) -> None:
        raise ValueError(f"declined {msg.card}")

    return app


def test_a_key_is_32_random_bytes_in_base64():
    key = Keyring.generate_key()
    assert len(base64.urlsafe_b64decode(key)) == 32
    assert key != Keyring.generate_key()


def test_a_ring_parses_ids_and_keys_the_first_current(monkeypatch):
    ring = Keyring.parse(f"k2={K2}, k1={K1}")
    assert ring.current == "k2" and ring.ids == ("k2", "k1")
    monkeypatch.setenv("RABBITQ_KEYS", f"k1={K1}")
    assert Keyring.from_env().ids == ("k1",)
    assert K1 not in repr(Keyring.from_env()) and "k1" in repr(Keyring.from_env())


@pytest.mark.parametrize(
    ("keys", "current", "says"),
    [
        ({}, None, "at least one key"),
        ({"k1": K1, "k2": K2}, None, "name the current key"),
        ({"k1": K1}, "k9", "not in the ring"),
        ({"bad id!": K1}, None, "key id"),
        ({"k1": base64.b64encode(b"short").decode()}, None, "has 5 bytes"),
        ({"k1": "%%%"}, None, "has"),
    ],
)
def test_a_bad_ring_is_one_line(keys, current, says):
    with pytest.raises(ConfigurationError, match=says):
        Keyring(keys, current=current)


def test_from_env_without_the_variable_says_how(monkeypatch):
    monkeypatch.delenv("RABBITQ_KEYS", raising=False)
    with pytest.raises(ConfigurationError, match="rabbitq keys generate"):
        Keyring.from_env()
    assert Keyring.from_env(default=f"dev={K1}").current == "dev"


def test_the_missing_extra_is_named():
    exc = ModuleNotFoundError("No module named 'cryptography'", name="cryptography")
    assert "pip install 'rabbitq[encryption]'" in missing("App(encryption=...)", exc)


def test_a_body_opens_only_for_its_message_and_type():
    cipher = Cipher(Keyring({"k2": K2, "k1": K1}, current="k2"))
    key_id, sealed = cipher.seal_body(b'{"card": "x"}', "m1", "crypto.pay")
    assert key_id == "k2" and b"card" not in sealed
    assert cipher.open_body("k2", sealed, "m1", "crypto.pay") == b'{"card": "x"}'
    for mid, kind in [("m2", "crypto.pay"), ("m1", "other.type")]:
        with pytest.raises(Undecryptable, match="did not authenticate"):
            cipher.open_body("k2", sealed, mid, kind)
    tampered = sealed[:-1] + bytes([sealed[-1] ^ 1])
    with pytest.raises(Undecryptable):
        cipher.open_body("k2", tampered, "m1", "crypto.pay")
    with pytest.raises(Undecryptable, match="'k9' is not in the key ring"):
        cipher.open_body("k9", sealed, "m1", "crypto.pay")


def test_an_old_key_still_opens_what_it_sealed():
    old = Cipher(Keyring({"k1": K1}))
    _, sealed = old.seal_body(b"{}", "m1", "t")
    new = Cipher(Keyring({"k2": K2, "k1": K1}, current="k2"))
    assert new.open_body("k1", sealed, "m1", "t") == b"{}"


def test_an_error_keeps_its_type_and_hides_its_text():
    cipher = Cipher(Keyring({"k2": K2}))
    sealed = seal_error(cipher, f"ValueError: declined {MARKER}", "m1")
    assert sealed.startswith("ValueError: enc:k2:") and MARKER not in sealed
    assert cipher.open_text(sealed, "m1") == f"ValueError: declined {MARKER}"
    assert shown_text(sealed, "m1", None) == f"ValueError: {described('k2')}"
    assert shown_text(sealed, "m2", cipher) == f"ValueError: {described('k2')}"  # bound to m1
    long = seal_error(cipher, "E: " + "x" * 5000, "m1")
    assert len(long) < 500 and len(cipher.open_text(long, "m1")) <= MAX_SEALED_ERROR + 3
    assert seal_error(cipher, "no type here", "m1").startswith("enc:k2:")


async def test_the_publish_step_and_the_delivery_stage_are_added_only_when_asked():
    plain = App(queue="crypto-plain")
    assert plain.publish_steps == () and plain.delivery_stages == ()
    assert cipher_of(plain) is None
    app = _app()
    assert [s.name for s in app.publish_steps] == ["encrypt"]
    assert [s.name for s in app.delivery_stages] == ["decrypt"]


def _sealed_delivery(app: App, message: Message, mid: str) -> tuple[bytes, dict[str, str]]:
    props = new_properties(message, message_id=mid)
    cipher = cipher_of(app)
    assert cipher is not None
    body = cipher.seal_properties(encode(message), props, message.type_name())
    assert props.headers is not None
    return body, dict(props.headers)


async def test_the_handler_sees_the_clear_message_and_the_error_leaves_encrypted(caplog):
    app = _app()
    mid = uuid.uuid4().hex
    body, headers = _sealed_delivery(app, Pay(card=MARKER), mid)
    assert MARKER.encode() not in body and headers[KEY_ID] == "k2"
    with caplog.at_level(logging.INFO):
        result = await deliver(app, body, type="crypto.pay", headers=headers, message_id=mid)
    assert result.retried and result.error is not None
    assert MARKER not in result.error and result.error.startswith("ValueError: enc:k2:")
    assert cipher_of(app).open_text(result.error, mid) == f"ValueError: declined {MARKER}"  # type: ignore[union-attr]
    assert MARKER not in caplog.text


async def test_a_body_under_an_unknown_key_is_dead_lettered_undecryptable_at_once():
    writer = _app({"k9": K1}, current="k9")
    reader = _app()
    mid = uuid.uuid4().hex
    body, headers = _sealed_delivery(writer, Pay(card=MARKER), mid)
    result = await deliver(reader, body, type="crypto.pay", headers=headers, message_id=mid)
    assert result.dead_lettered and result.reason == "undecryptable"
    assert "'k9'" in (result.error or "")
    # a changed body: the tag fails, same reason, never a retry
    body, headers = _sealed_delivery(reader, Pay(card=MARKER), mid)
    result = await deliver(reader, body, type="crypto.pay", headers=headers, message_id="other")
    assert result.dead_lettered and result.reason == "undecryptable"


async def test_a_clear_message_of_an_encrypted_app_is_handled_and_its_error_sealed():
    app = _app()
    result = await deliver(app, Pay(card=MARKER))
    assert result.retried and MARKER not in (result.error or "")


def test_the_undecryptable_reason_is_listed():
    from rabbitq.retry import DLQ_REASONS

    assert "undecryptable" in DLQ_REASONS
    assert h.KEY_ID == KEY_ID == "rabbitq-key-id"


class _Results:
    """An in-memory chord store's results."""

    def __init__(self) -> None:
        self.kept: dict[str, bytes] = {}

    async def put_result(self, message_id: str, result: bytes) -> None:
        self.kept[message_id] = result

    async def result(self, message_id: str) -> object:
        import orjson

        return orjson.loads(self.kept[message_id]) if message_id in self.kept else None

    async def results(self, group_id: str) -> list[tuple[int, str, object]]:
        return [(i, mid, await self.result(mid)) for i, mid in enumerate(sorted(self.kept))]


async def test_a_result_is_kept_encrypted_and_read_back_clear():
    import orjson

    from rabbitq.crypto.results import SealedChords

    inner = _Results()
    inner.kept["old"] = orjson.dumps({"card": "kept before encryption"})
    store = SealedChords(inner, Cipher(Keyring({"k2": K2})))
    await store.put_result("m1", orjson.dumps({"card": MARKER}))
    assert MARKER.encode() not in inner.kept["m1"]
    assert await store.result("m1") == {"card": MARKER}
    assert await store.result("old") == {"card": "kept before encryption"}
    assert [r for _, _, r in await store.results("g")][0] == {"card": MARKER}


def _dead(cipher: Cipher, mid: str = "m1") -> object:
    from rabbitq.dlq.message import DeadMessage

    props = new_properties(Pay(card=MARKER), message_id=mid)
    body = cipher.seal_properties(encode(Pay(card=MARKER)), props, "crypto.pay")
    headers = {**(props.headers or {}), h.ERROR: seal_error(cipher, f"ValueError: {MARKER}", mid)}
    return DeadMessage(
        dlq="q.dlq", body=body, headers=headers,
        properties={"message_id": mid, "type": "crypto.pay"},
    )  # fmt: skip


def test_rewrap_moves_body_and_error_under_the_current_key():
    from rabbitq.crypto.rewrap import count_keys, rewrapped
    from rabbitq.crypto.view import reveal

    old = Cipher(Keyring({"k1": K1}))
    m = _dead(old)
    assert count_keys([m]) == {"k1": 1}  # type: ignore[list-item]
    new = Cipher(Keyring({"k2": K2, "k1": K1}, current="k2"))
    copy = rewrapped(m, new)  # type: ignore[arg-type]
    assert copy is not None
    headers = copy.properties.headers or {}
    assert headers[KEY_ID] == "k2" and headers[h.ERROR].startswith("ValueError: enc:k2:")
    only_new = Cipher(Keyring({"k2": K2}))
    assert only_new.open_body("k2", copy.body, "m1", "crypto.pay") == encode(Pay(card=MARKER))
    assert only_new.open_text(headers[h.ERROR], "m1") == f"ValueError: {MARKER}"
    from rabbitq.dlq.message import DeadMessage

    moved = DeadMessage(dlq="q.dlq", body=copy.body, headers=dict(headers),
                        properties={"message_id": "m1", "type": "crypto.pay"})  # fmt: skip
    assert rewrapped(moved, new) is None  # already current: left alone
    shown = reveal(moved, only_new)
    assert MARKER.encode() in shown.body and MARKER in (shown.error or "")
    blind = reveal(moved, None)
    assert blind.error == f"ValueError: {described('k2')}" and MARKER.encode() not in blind.body
    with pytest.raises(Undecryptable):
        rewrapped(m, Cipher(Keyring({"k2": K2})))  # type: ignore[arg-type]  # k1 retired too early


async def test_a_scheduled_tick_is_published_encrypted():
    from datetime import UTC, datetime

    from rabbitq.schedule import plan
    from rabbitq.schedule.tick import Send, commit

    class Tx:
        def __init__(self) -> None:
            self.published: list[tuple[bytes, object]] = []

        async def basic_publish(self, body, *, exchange, routing_key, properties):
            self.published.append((body, properties))

        async def basic_ack(self, *args, **kwargs):
            pass

        async def tx_commit(self, *args, **kwargs):
            pass

    cipher = Cipher(Keyring({"k2": K2}))
    tx = Tx()
    tick = datetime(2026, 1, 1, tzinfo=UTC)
    await commit(
        tx,  # type: ignore[arg-type]
        exchange="x", progress_queue="q.progress",
        sends=[Send(schedule="daily", tick=tick, index=0, message=Pay(card=MARKER))],
        record=plan.Progress(ticks={"daily": tick}), acks=[], cipher=cipher,
    )  # fmt: skip
    body, props = tx.published[0]
    assert MARKER.encode() not in body and props.headers[KEY_ID] == "k2"  # type: ignore[attr-defined]
    assert MARKER.encode() in cipher.open_body("k2", body, props.message_id, "crypto.pay")  # type: ignore[attr-defined]


def test_grep_reads_an_encrypted_error_as_its_type_and_key_never_its_bytes():
    from rabbitq.dlq.message import Filters

    m = _dead(Cipher(Keyring({"k2": K2})))
    token = m.error.split("enc:k2:")[1]  # type: ignore[attr-defined]
    assert Filters.build(grep="ValueError: encrypted \\(key k2\\)").matches(m)  # type: ignore[arg-type]
    assert not Filters.build(grep=token[:8]).matches(m)  # type: ignore[arg-type]
    assert not Filters.build(grep=MARKER).matches(m)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (f"k2={K2},,k1={K1}", "entry 2 of the keys is empty"),
        (f"k2={K2}, ", "entry 2 of the keys is empty"),
        (f"k2={K2},k1=", "key 'k1' has 0 bytes"),
        (f"k2={K2},k2={K1}", "key id 'k2' is given twice"),
        (" \n", "no keys given"),
    ],
    ids=["empty between", "empty at the end", "empty key", "id twice", "none"],
)
def test_an_empty_or_repeated_entry_of_the_keys_is_refused_in_one_line(text, says):
    with pytest.raises(ConfigurationError, match=says) as caught:
        Keyring.parse(text)
    assert "\n" not in str(caught.value)


def test_newlines_around_the_keys_are_no_entry(monkeypatch):
    monkeypatch.setenv("RABBITQ_KEYS", f"\nk2={K2}\nk1={K1}\n")
    assert Keyring.from_env().ids == ("k2", "k1")
