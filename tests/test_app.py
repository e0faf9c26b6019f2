"""The App: configuration, handler registration, its topology and load_app."""

from __future__ import annotations

import functools
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rabbitq import App, AppLoadError, ConfigurationError, Context, Message, RetryPolicy, load_app
from rabbitq.app import DEFAULT_TIMEOUT


class Welcome(Message, type="unit.app.welcome"):
    to: str


class Invoice(Message, type="unit.app.invoice"):
    number: int


class Refund(Message, type="unit.app.refund"):
    number: int


@pytest.fixture
def app() -> App:
    return App(queue="unit-app", retry=RetryPolicy(delays=(1, 10)))


def test_an_async_handler_is_registered_as_async(app: App):
    @app.handler(Welcome)
    async def welcome(msg: Welcome) -> None: ...

    handler = app.handlers["unit.app.welcome"]
    assert handler.fn is welcome
    assert handler.model is Welcome
    assert handler.type_name == "unit.app.welcome"
    assert handler.is_async
    assert not handler.wants_context


def test_a_sync_handler_is_registered_to_run_in_a_thread(app: App):
    @app.handler(Welcome)
    def welcome(msg: Welcome, ctx: Context) -> None: ...

    handler = app.handlers["unit.app.welcome"]
    assert not handler.is_async
    assert handler.wants_context


def test_a_callable_object_with_an_async_call_is_registered_as_async(app: App):
    class SendWelcome:
        async def __call__(self, msg: Welcome, ctx: Context) -> None: ...

    app.handler(Welcome)(SendWelcome())
    handler = app.handlers["unit.app.welcome"]
    assert handler.is_async
    assert handler.wants_context


def test_a_partial_of_an_async_function_is_registered_as_async(app: App):
    async def send(msg: Welcome, ctx: Context, *, sender: str) -> None: ...

    app.handler(Welcome)(functools.partial(send, sender="noreply"))
    assert app.handlers["unit.app.welcome"].is_async


def test_a_callable_object_with_a_wrong_signature_is_a_configuration_error(app: App):
    class TooMany:
        def __call__(self, msg: Welcome, ctx: Context, extra: int) -> None: ...

    with pytest.raises(ConfigurationError, match="TooMany object.*must take"):
        app.handler(Welcome)(TooMany())


def test_the_decorator_returns_the_function_unchanged(app: App):
    async def welcome(msg: Welcome) -> None: ...

    assert app.handler(Welcome)(welcome) is welcome


@pytest.mark.parametrize(
    ("fn", "wants_context"),
    [
        (lambda msg: None, False),
        (lambda msg, ctx: None, True),
        (lambda msg, ctx=None: None, True),
        (lambda msg, *, extra=1: None, False),
        (lambda msg, **kwargs: None, False),
    ],
)
def test_the_context_is_passed_only_to_a_handler_that_takes_a_second_argument(
    app: App, fn, wants_context
):
    app.handler(Welcome)(fn)
    assert app.handlers["unit.app.welcome"].wants_context is wants_context


@pytest.mark.parametrize(
    "fn",
    [lambda: None, lambda msg, ctx, extra: None, lambda *args: None],
    ids=["no-arguments", "three-arguments", "only-star-args"],
)
def test_a_handler_with_a_wrong_signature_is_a_configuration_error(app: App, fn):
    with pytest.raises(ConfigurationError, match=r"must take \(message\) or \(message, ctx\)"):
        app.handler(Welcome)(fn)
    assert "unit.app.welcome" not in app.handlers


def test_a_second_handler_for_a_type_is_a_configuration_error(app: App):
    @app.handler(Welcome)
    async def first(msg: Welcome) -> None: ...

    with pytest.raises(ConfigurationError, match="already has a handler for 'unit.app.welcome'"):

        @app.handler(Welcome)
        async def second(msg: Welcome) -> None: ...

    assert app.handlers["unit.app.welcome"].fn is first


@pytest.mark.parametrize("model", [int, "unit.app.welcome", Welcome(to="a@b.c"), None, object])
def test_handler_takes_only_a_message_class(app: App, model):
    with pytest.raises(ConfigurationError, match="takes a Message subclass"):
        app.handler(model)


def test_handler_of_an_untyped_message_class_is_a_configuration_error(app: App):
    class Untyped(Message):
        pass

    with pytest.raises(ConfigurationError, match="has no message type"):
        app.handler(Untyped)


def test_a_handler_gets_the_apps_retry_policy_and_timeout_by_default():
    app = App(queue="unit-app", retry=RetryPolicy(delays=(2,)), timeout=12)

    @app.handler(Welcome)
    async def welcome(msg: Welcome) -> None: ...

    handler = app.handlers["unit.app.welcome"]
    assert handler.retry == RetryPolicy(delays=(2,))
    assert handler.timeout == 12


def test_a_handler_may_override_the_retry_policy_and_timeout(app: App):
    @app.handler(Welcome, retry=RetryPolicy(delays=(5,)), timeout=2.5)
    async def welcome(msg: Welcome) -> None: ...

    handler = app.handlers["unit.app.welcome"]
    assert handler.retry.delays == (5,)
    assert handler.timeout == 2.5


def test_timeout_none_means_no_limit_for_a_handler(app: App):
    @app.handler(Welcome, timeout=None)
    async def welcome(msg: Welcome) -> None: ...

    assert app.handlers["unit.app.welcome"].timeout is None


def test_timeout_none_on_the_app_means_no_limit_for_every_handler():
    app = App(queue="unit-app", timeout=None)

    @app.handler(Welcome)
    async def welcome(msg: Welcome) -> None: ...

    assert app.handlers["unit.app.welcome"].timeout is None


def test_the_default_timeout_is_five_minutes():
    assert App(queue="unit-app").timeout == DEFAULT_TIMEOUT == 300


@pytest.mark.parametrize("timeout", [0, -1, float("nan")])
def test_a_timeout_that_is_not_positive_is_a_configuration_error(app: App, timeout):
    with pytest.raises(ConfigurationError, match="timeout must be positive"):
        app.handler(Welcome, timeout=timeout)
    with pytest.raises(ConfigurationError, match="timeout must be positive"):
        App(queue="unit-app", timeout=timeout)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"prefetch": 0}, "prefetch must be at least 1"),
        ({"prefetch": -3}, "prefetch must be at least 1"),
        ({"queue_type": "stream"}, "queue_type must be 'classic' or 'quorum'"),
        ({"exchange": ""}, "exchange must be a name"),
        ({"queue": ""}, "invalid queue name"),
        ({"queue": "amq.gen-x"}, "invalid queue name"),
        ({"delivery_limit": 0}, "delivery_limit"),
    ],
)
def test_an_app_that_cannot_work_is_refused_when_it_is_built(kwargs, match):
    with pytest.raises(ConfigurationError, match=match):
        App(**{"queue": "unit-app", **kwargs})


def test_app_arguments_are_keyword_only():
    with pytest.raises(TypeError):
        App("unit-app")  # type: ignore[call-arg]


def test_the_default_app_matches_the_documented_defaults():
    app = App(queue="emails")
    assert app.exchange == "rabbitq"
    assert app.prefetch == 64
    assert app.retry == RetryPolicy(delays=(1, 10, 60, 600))
    assert app.queue_type == "quorum"
    assert app.delivery_limit == 10
    assert app.url is None
    assert repr(app) == "App(queue='emails', exchange='rabbitq')"


def test_topology_has_a_retry_queue_for_every_delay_of_every_handler(app: App):
    @app.handler(Welcome, retry=RetryPolicy(delays=(5, 10)))
    async def welcome(msg: Welcome) -> None: ...

    @app.handler(Invoice, retry=RetryPolicy(delays=(0.5,)))
    async def invoice(msg: Invoice) -> None: ...

    @app.handler(Refund)
    async def refund(msg: Refund) -> None: ...

    topology = app.topology()
    assert [q.name for q in topology.retries] == [
        "unit-app.retry.500ms",
        "unit-app.retry.1s",
        "unit-app.retry.5s",
        "unit-app.retry.10s",
    ]
    assert topology.routing_keys == ("unit.app.invoice", "unit.app.refund", "unit.app.welcome")
    assert topology.exchange == "rabbitq"


def test_topology_of_a_quorum_app_makes_every_queue_quorum():
    app = App(
        queue="unit-app", queue_type="quorum", delivery_limit=4, retry=RetryPolicy(delays=(1,))
    )
    for spec in app.topology().queues:
        assert spec.arguments["x-queue-type"] == "quorum"
    assert app.topology().main.arguments["x-delivery-limit"] == 4


def test_resolved_url_prefers_the_override_then_the_app_then_the_environment(monkeypatch):
    monkeypatch.setenv("RABBITQ_URL", "amqp://env/")
    assert App(queue="q").resolved_url() == "amqp://env/"
    assert App(queue="q", url="amqp://app/").resolved_url() == "amqp://app/"
    assert App(queue="q", url="amqp://app/").resolved_url("amqp://cli/") == "amqp://cli/"
    monkeypatch.delenv("RABBITQ_URL")
    assert App(queue="q").resolved_url() == "amqp://guest:guest@localhost:5672/"


# -- load_app ---------------------------------------------------------------------


@pytest.fixture
def write_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., str]]:
    """``write_module(name, source)``: an importable module in a fresh current directory."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))

    def write(name: str, source: str) -> str:
        *packages, module = name.split(".")
        directory = tmp_path
        for package in packages:
            directory = directory / package
            directory.mkdir(exist_ok=True)
            (directory / "__init__.py").touch()
        (directory / f"{module}.py").write_text(textwrap.dedent(source))
        return name

    yield write
    for name in [n for n in sys.modules if n.startswith("rq_unit_app_")]:
        del sys.modules[name]


APP_MODULE = """
    from rabbitq import App, Message

    class Greeting(Message, type="unit.app.loaded.{name}"):
        text: str

    app = App(queue="unit-app-loaded")

    @app.handler(Greeting)
    async def greet(msg):
        pass

    class Holder:
        app = app

    not_an_app = 42
"""


def test_load_app_imports_module_colon_attribute(write_module):
    write_module("rq_unit_app_ok", APP_MODULE.format(name="ok"))
    app = load_app("rq_unit_app_ok:app")
    assert isinstance(app, App)
    assert list(app.handlers) == ["unit.app.loaded.ok"]


def test_load_app_follows_a_dotted_attribute_and_a_package_path(write_module):
    write_module("rq_unit_app_pkg.services.mail", APP_MODULE.format(name="pkg"))
    app = load_app("rq_unit_app_pkg.services.mail:Holder.app")
    assert app.queue == "unit-app-loaded"


def test_load_app_finds_modules_in_the_current_directory(tmp_path, monkeypatch):
    (tmp_path / "rq_unit_app_cwd.py").write_text(textwrap.dedent(APP_MODULE.format(name="cwd")))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "rq_unit_app_cwd", raising=False)
    try:
        assert load_app("rq_unit_app_cwd:app").queue == "unit-app-loaded"
    finally:
        sys.modules.pop("rq_unit_app_cwd", None)


@pytest.mark.parametrize("spec", ["rq_unit_app_ok", "rq_unit_app_ok:", ":app", "", "a.b.c"])
def test_load_app_without_module_colon_app_explains_the_format(spec):
    with pytest.raises(AppLoadError, match=r"expected MODULE:APP \(for example"):
        load_app(spec)


def test_load_app_of_a_missing_module_says_so(write_module):
    with pytest.raises(AppLoadError, match="cannot import module 'rq_unit_app_nowhere': no such"):
        load_app("rq_unit_app_nowhere:app")


def test_load_app_of_a_missing_submodule_says_so(write_module):
    write_module("rq_unit_app_parent.present", "x = 1\n")
    with pytest.raises(AppLoadError, match="cannot import module 'rq_unit_app_parent.absent'"):
        load_app("rq_unit_app_parent.absent:app")


def test_load_app_of_a_missing_attribute_names_it(write_module):
    write_module("rq_unit_app_attr", APP_MODULE.format(name="attr"))
    with pytest.raises(AppLoadError, match="module 'rq_unit_app_attr' has no attribute 'nope'"):
        load_app("rq_unit_app_attr:nope")


def test_load_app_of_something_that_is_not_an_app_says_what_it_is(write_module):
    write_module("rq_unit_app_notapp", APP_MODULE.format(name="notapp"))
    with pytest.raises(
        AppLoadError, match="'rq_unit_app_notapp:not_an_app' is a int, not a rabbitq"
    ):
        load_app("rq_unit_app_notapp:not_an_app")


def test_load_app_of_a_module_that_raises_on_import_reports_the_error(write_module):
    write_module("rq_unit_app_raises", "raise RuntimeError('no config file')\n")
    with pytest.raises(
        AppLoadError,
        match="importing 'rq_unit_app_raises' failed at rq_unit_app_raises.py:1: RuntimeError: "
        "no config file",
    ) as info:
        load_app("rq_unit_app_raises:app")
    assert isinstance(info.value.__cause__, RuntimeError)


def test_load_app_of_a_module_with_a_syntax_error_reports_it(write_module):
    write_module("rq_unit_app_syntax", "def broken(:\n")
    with pytest.raises(
        AppLoadError,
        match="importing 'rq_unit_app_syntax' failed at rq_unit_app_syntax.py:1: "
        "SyntaxError: invalid syntax",
    ):
        load_app("rq_unit_app_syntax:app")


def test_a_missing_dependency_of_the_module_is_not_mistaken_for_the_module(write_module):
    # The dependency's name is a prefix of the module's name, but it is another module.
    write_module("rq_unit_app_dep_service", "import rq_unit_app_dep\n")
    with pytest.raises(AppLoadError) as info:
        load_app("rq_unit_app_dep_service:app")
    assert str(info.value) == (
        "importing 'rq_unit_app_dep_service' failed at rq_unit_app_dep_service.py:1: "
        "No module named 'rq_unit_app_dep' (RABBITQ_TRACEBACK=1 prints the traceback)"
    )


def test_a_missing_dependency_of_a_package_module_is_reported_as_such(write_module):
    write_module("rq_unit_app_deppkg.tasks", "import rq_unit_app_missing_sdk\n")
    with pytest.raises(AppLoadError, match="No module named 'rq_unit_app_missing_sdk'"):
        load_app("rq_unit_app_deppkg.tasks:app")
