"""What `wrap` says of its command line (proxy.wrap.command): the usage and the defaults its help
shows, and the arguments before `--` it does not know."""

from __future__ import annotations

import pytest

from proxy.cli import main
from proxy.wrap.command import unknown_arguments


def wrap_help(capsys) -> str:
    with pytest.raises(SystemExit):
        main(["wrap", "--help"])
    return " ".join(capsys.readouterr().out.split())


def test_the_help_shows_where_the_agents_arguments_go_and_wraps_own_defaults(capsys):
    text = wrap_help(capsys)
    assert text.startswith("usage: offload-proxy wrap [-h] AGENT [--proxy-url URL] [--keep] [--quiet] "
                           "[proxy options] [-- AGENT ARGS]")
    # without --port or --data-dir wrap takes a free port and a store of its own, not serve's defaults
    assert "[env OFFLOAD_PORT; default a free one]" in text
    assert "[env OFFLOAD_DATA_DIR; default a temporary folder, removed at exit]" in text


def test_serve_keeps_the_fields_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "[env OFFLOAD_PORT; default 8080]" in text and "[env OFFLOAD_DATA_DIR; default .offload-data]" in text


def test_an_agents_argument_before_the_double_dash_is_shown_where_it_goes():
    assert unknown_arguments("codex", ["exec", "hi"]) == (
        "unrecognized arguments exec hi: the agent's own arguments go after --, as in: offload-proxy wrap codex -- exec hi")


def test_a_misspelt_proxy_option_gets_its_spelling_and_no_example_with_its_value_as_the_agent():
    # `wrap --keep-recnt 2 codex`: argparse took `2` for the agent
    assert unknown_arguments("2", ["--keep-recnt", "codex"]) == (
        "unrecognized arguments --keep-recnt codex: proxy options go before the agent (offload-proxy wrap --help "
        "lists them), the agent's own arguments after -- (a proxy option? did you mean --keep-recent?)")
    # an option of the agent's that looks like a proxy option: both readings are offered
    assert unknown_arguments("claude", ["--model", "sonnet"]).endswith(
        "as in: offload-proxy wrap claude -- --model sonnet (a proxy option? did you mean --mode?)")
    assert unknown_arguments("codex", ["--upstrem=http://x"]).endswith("(a proxy option? did you mean --upstream?)")
    assert "did you mean" not in unknown_arguments("codex", ["--json", "-q"])


def test_the_command_line_says_it_in_one_error(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["wrap", "--keep-recnt", "2", "codex"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "offload-proxy: error: wrap: unrecognized arguments --keep-recnt codex: proxy options go before the agent "
        "(offload-proxy wrap --help lists them), the agent's own arguments after -- "
        "(a proxy option? did you mean --keep-recent?)")
