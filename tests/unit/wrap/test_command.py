"""What `wrap` makes of its command line before it starts anything (proxy.wrap._command): the
usage and the defaults its help shows, the arguments before `--` it does not know, --proxy-url,
an upstream at the proxy's own address, the proxy's secrets kept from the agent."""

from __future__ import annotations

import pytest

from proxy.cli import main
from proxy.config import ServerSettings
from proxy.wrap._command import SECRET_SETTINGS, drop_secrets, proxy_root, same_address, unknown_arguments
from proxy.wrap._proxy import WrapError


def wrap_help(capsys) -> str:
    with pytest.raises(SystemExit):
        main(["wrap", "--help"])
    return " ".join(capsys.readouterr().out.split())


def test_the_help_shows_where_the_agents_arguments_go_and_wraps_own_defaults(capsys):
    text = wrap_help(capsys)
    assert text.startswith(
        "usage: offload-proxy wrap [-h] AGENT [--proxy-url URL] [--keep] [--quiet] [proxy options] [-- AGENT ARGS]"
    )
    # without --port or --data-dir wrap takes a free port and a store of its own, not serve's defaults
    assert "[env OFFLOAD_PORT; default a free one]" in text
    assert "[env OFFLOAD_DATA_DIR; default a temporary folder, removed at exit]" in text


def test_serve_keeps_the_fields_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "[env OFFLOAD_PORT; default 8080]" in text and "[env OFFLOAD_DATA_DIR; default .offload-data]" in text
    # a field without a value of its own names the built-in default in its text, never "default None"
    assert "default None" not in text
    assert "Default X-Offload-Max-Total-Tokens (18000). [env OFFLOAD_MAX_TOTAL_TOKENS]" in text
    assert "auto|compact|compress|off|observe (auto). [env OFFLOAD_MODE]" in text


def test_an_agents_argument_before_the_double_dash_is_shown_where_it_goes():
    assert unknown_arguments("codex", ["exec", "hi"]) == (
        "unrecognized arguments exec hi: the agent's own arguments go after --, as in: offload-proxy wrap codex -- exec hi"
    )


def test_a_misspelt_proxy_option_gets_its_spelling_and_no_example_with_its_value_as_the_agent():
    # `wrap --keep-recnt 2 codex`: argparse took `2` for the agent
    assert unknown_arguments("2", ["--keep-recnt", "codex"]) == (
        "unrecognized arguments --keep-recnt codex: proxy options go before the agent (offload-proxy wrap --help "
        "lists them), the agent's own arguments after -- (a proxy option? did you mean --keep-recent?)"
    )
    # an option of the agent's that looks like a proxy option: both readings are offered
    assert unknown_arguments("claude", ["--model", "sonnet"]).endswith(
        "as in: offload-proxy wrap claude -- --model sonnet (a proxy option? did you mean --mode?)"
    )
    assert unknown_arguments("codex", ["--upstrem=http://x"]).endswith("(a proxy option? did you mean --upstream?)")
    assert "did you mean" not in unknown_arguments("codex", ["--json", "-q"])


def test_the_command_line_says_it_in_one_error(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["wrap", "--keep-recnt", "2", "codex"])
    assert exited.value.code == 2
    usage, message = capsys.readouterr().err.splitlines()[-2:]
    assert usage.startswith("usage: offload-proxy wrap [-h] AGENT")  # wrap's usage, not the top-level one
    assert message == (
        "offload-proxy wrap: error: unrecognized arguments --keep-recnt codex: proxy options go before the agent "
        "(offload-proxy wrap --help lists them), the agent's own arguments after -- "
        "(a proxy option? did you mean --keep-recent?)"
    )


def test_a_proxy_url_is_its_root():
    assert proxy_root("http://127.0.0.1:8080/") == "http://127.0.0.1:8080"
    assert proxy_root("https://proxy.example/team/") == "https://proxy.example/team"
    assert proxy_root("http://[::1]:8080") == "http://[::1]:8080"


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://[::1", "is not a valid URL: Invalid IPv6 URL"),
        ("http://127.0.0.1:abc", "is not a valid URL: Port could not be cast"),
        ("http://127.0.0.1:99999", "is not a valid URL: Port out of range"),
        ("http://exa mple.com", "holds spaces or control characters"),
        ("http://127.0.0.1:8080\n", "holds spaces or control characters"),
        ("ftp://127.0.0.1", "is not an http:// or https:// URL"),
        ("http://", "is not an http:// or https:// URL"),
        ("127.0.0.1:8080", "is not an http:// or https:// URL"),
        ("http://127.0.0.1:8080/?x=1", "no query or fragment"),
        ("http://127.0.0.1:8080/?", "no query or fragment"),
        ("http://127.0.0.1:8080#top", "no query or fragment"),
        ("http://me:s3cret@127.0.0.1:8080", "'http://***@127.0.0.1:8080': no user name or password"),
        ("http://me@127.0.0.1:8080", "'http://***@127.0.0.1:8080': no user name or password"),
    ],
)
def test_a_proxy_url_that_is_not_one(url, says):
    with pytest.raises(WrapError) as raised:
        proxy_root(url)
    assert raised.value.status == 2
    message = str(raised.value)
    assert message.startswith("--proxy-url ") and says in message and "s3cret" not in message
    assert "\n" not in message


def test_an_upstream_at_the_proxys_own_address():
    for url in (
        "http://127.0.0.1:8080",
        "http://localhost:8080/v1",
        "http://[::1]:8080",
        "http://127.0.0.2:8080",
        "HTTP://LOCALHOST:8080",
    ):
        assert same_address(url, "127.0.0.1", 8080), url
    assert same_address("http://0.0.0.0:80", "0.0.0.0", 80)
    assert same_address("https://localhost", "::1", 443)
    assert same_address("http://proxy.lan:8080", "proxy.lan", 8080)
    for url in (
        "http://127.0.0.1:8081",
        "https://127.0.0.1",
        "https://api.openai.com/v1",
        "http://10.0.0.2:8080",
        "http://[::1",
        "http://127.0.0.1:abc",
    ):
        assert not same_address(url, "127.0.0.1", 8080), url
    assert not same_address("http://127.0.0.1:8080", "10.0.0.2", 8080)


def test_every_secret_setting_is_kept_from_the_agent():
    """A setting added later that holds a key, a token or a password in a URL is on the list."""
    secret = {
        name
        for name in ServerSettings.model_fields
        if name.endswith(("_key", "_key_previous", "_token")) or name == "redis_url"
    }
    assert secret == set(SECRET_SETTINGS)


def test_secrets_are_dropped_in_every_spelling_the_settings_read():
    """pydantic-settings reads OFFLOAD_* names lower-cased: each of these configures the proxy, and
    none may reach the agent; the proxy's other settings and look-alike names stay."""
    secrets = {
        "offload_encryption_key": "a",
        "Offload_Namespace_Key": "b",
        "oFFLOAD_uPSTREAM_API_KEY": "c",
        "OFFLOAD_ADMIN_TOKEN": "d",
        "offload_redis_url": "e",
        "OFFLOAD_ANTHROPIC_API_\u212aEY": "f",
        "Offload_Encryption_Key_Previous": "g",
    }
    kept = {
        "OFFLOAD_LOG_FORMAT": "text",
        "offload_mode": "compress",
        "OFFLOAD_ADMIN_TOKENS": "x",
        "OPENAI_API_KEY": "sk-user",
        "PATH": "/bin",
    }
    env = {**secrets, **kept}
    drop_secrets(env)
    assert env == kept
