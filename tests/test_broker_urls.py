"""Several broker addresses: how they are written, validated, redacted and ordered."""

from __future__ import annotations

import random

import pytest
from click.testing import CliRunner

from rabbitq import App
from rabbitq._amqp.failover import connection_order
from rabbitq.cli.common import url_option
from rabbitq.errors import ConfigurationError
from rabbitq.settings import broker_urls, join_urls, redact_url, scrub, url_password

A = "amqp://u:secret1@node1:5672/"
B = "amqp://u:secret1@node2:5673/vh"


def test_one_url_is_one_address():
    assert broker_urls(A) == (A,)


def test_commas_separate_the_nodes_of_a_cluster():
    assert broker_urls(f"{A},{B}") == (A, B)
    assert broker_urls(f" {A} , {B} ") == (A, B)


def test_a_comma_inside_a_password_or_query_does_not_split_a_url():
    odd = "amqp://u:pa,ss@node1/?x=1,2"
    assert broker_urls(f"{odd},{B}") == (odd, B)


@pytest.mark.parametrize(
    "bad", ["", "node1:5672", "http://node1/", f"{A},amqps://u:p@node2/", "amqp://u:p@node1:x/"]
)
def test_what_is_not_a_list_of_broker_urls_is_refused_without_the_password(bad):
    with pytest.raises(ConfigurationError) as info:
        broker_urls(bad)
    assert "secret1" not in str(info.value)


def test_every_password_is_redacted():
    assert redact_url(f"{A},{B}") == "amqp://u:***@node1:5672/,amqp://u:***@node2:5673/vh"
    assert url_password(f"{A},{B}") == "secret1"
    assert "secret1" not in scrub(f"cannot reach {A},{B}", url_password(f"{A},{B}"))


def test_an_app_takes_a_list_of_urls_and_validates_it():
    app = App(queue="q", url=[A, B])
    assert app.url == f"{A},{B}"
    assert app.resolved_url() == f"{A},{B}"
    with pytest.raises(ConfigurationError):
        App(queue="q", url=[A, "nonsense"])
    assert join_urls(A) == A


def test_the_order_is_shuffled_so_that_workers_spread_over_the_nodes():
    urls = [f"amqp://h{i}/" for i in range(3)]
    firsts = {connection_order(urls, random.Random(seed))[0] for seed in range(30)}
    assert firsts == set(urls)
    assert sorted(connection_order(urls)) == sorted(urls)


def test_url_repeated_on_the_command_line_becomes_one_comma_separated_url(monkeypatch):
    import click

    @click.command()
    @url_option
    def show(url):
        click.echo(url)

    runner = CliRunner()
    assert runner.invoke(show, ["--url", A, "--url", B]).output.strip() == f"{A},{B}"
    monkeypatch.setenv("RABBITQ_URL", f"{A},{B}")
    assert runner.invoke(show, []).output.strip() == f"{A},{B}"
    monkeypatch.delenv("RABBITQ_URL")
    assert runner.invoke(show, []).output.strip() == ""  # None: the default applies later
