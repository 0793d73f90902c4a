"""proxy.core.settings: per-request settings, the X-Offload-* header names, the holdout arm."""

from __future__ import annotations

import pytest

from proxy.core import settings
from proxy.core.settings import (
    KNOWN,
    MAX_NAME,
    MAX_NAMED,
    NO_MATCH,
    SETTING_FIELDS,
    UNMATCHED,
    SettingsError,
    SettingsResolver,
    arm,
    closest,
    header_name,
    position,
    unknown_headers,
)
from proxy.http.caller import load_tenants_file

# ==================== settings
# Per-request settings: defaults, tenants file, headers, validation, caps.


def test_defaults_match_the_documented_values():
    s = SettingsResolver({}).resolve({})
    assert (
        s.mode,
        s.max_total_tokens,
        s.tool_result_limit(),
        s.max_reload_tokens,
        s.max_reload_rounds,
        s.reload_tools,
    ) == ("auto", 18000, 6000, 8000, 4, True)
    assert s.max_tool_message_tokens is None and s.max_fresh_tool_message_tokens == 25_000
    assert s.keep_recent_for(1) == 1
    assert (s.precompress_ratio, s.hard_max_tokens) == (0.8, None)
    s = SettingsResolver({}).resolve({"X-Offload-Precompress-Ratio": "0", "X-Offload-Hard-Max-Tokens": "50000"})
    assert (s.precompress_ratio, s.hard_max_tokens) == (0.0, 50000)


def test_headers_override_tenant_overrides_server_default(tmp_path):
    tenants = tmp_path / "tenants.toml"
    tenants.write_text('[tenants.acme]\nmax_total_tokens = 5000\nmode = "compact"\n')
    resolver = SettingsResolver({"max_total_tokens": 30000}, load_tenants_file(tenants))
    assert resolver.resolve({}).max_total_tokens == 30000
    assert resolver.resolve({}, tenant="acme").max_total_tokens == 5000
    s = resolver.resolve(
        {"X-Offload-Max-Total-Tokens": "7000", "X-Offload-Reload-Tools": "off", "X-Offload-Keep-Recent": "3"},
        tenant="acme",
    )
    assert (s.max_total_tokens, s.mode, s.reload_tools, s.keep_recent) == (7000, "compact", False, 3)


def test_the_fresh_result_cap_from_the_server_a_tenant_or_a_header(tmp_path):
    tenants = tmp_path / "tenants.toml"
    tenants.write_text("[tenants.acme]\nmax_fresh_tool_message_tokens = 40000\n")
    resolver = SettingsResolver({"max_fresh_tool_message_tokens": 30000}, load_tenants_file(tenants))
    assert resolver.resolve({}).max_fresh_tool_message_tokens == 30000
    assert resolver.resolve({}, tenant="acme").max_fresh_tool_message_tokens == 40000
    assert (
        resolver.resolve(
            {"X-Offload-Max-Fresh-Tool-Message-Tokens": "5000"}, tenant="acme"
        ).max_fresh_tool_message_tokens
        == 5000
    )
    tenants.write_text("[tenants.acme]\nmax_fresh_tool_message_tokens = 0\n")
    with pytest.raises(ValueError, match="max_fresh_tool_message_tokens"):
        load_tenants_file(tenants)


def test_yaml_tenants_file(tmp_path):
    tenants = tmp_path / "tenants.yaml"
    tenants.write_text("tenants:\n  acme:\n    max_reload_rounds: 2\n")
    assert SettingsResolver({}, load_tenants_file(tenants)).resolve({}, tenant="acme").max_reload_rounds == 2


def test_bad_tenants_file_fails_at_startup(tmp_path):
    tenants = tmp_path / "tenants.toml"
    tenants.write_text("[tenants.acme]\nmax_total_tokens = -5\n")
    with pytest.raises(Exception):
        load_tenants_file(tenants)


@pytest.mark.parametrize(
    "header,value,expect",
    [
        ("X-Offload-Mode", "squash", "one of auto, compact, compress, off, observe"),
        ("X-Offload-Max-Total-Tokens", "-1", "an integer from 0 to"),
        ("X-Offload-Max-Reload-Rounds", "many", "an integer from 0 to 50"),
        ("X-Offload-Reload-Tools", "maybe", "on or off"),
        ("X-Offload-Tenant", "a b", "characters"),
        ("X-Offload-Session", "x" * 200, "characters"),
        ("X-Offload-Precompress-Ratio", "1.5", "a number from 0 to 1"),
        ("X-Offload-Precompress-Ratio", "nan", "a number from 0 to 1"),
        ("X-Offload-Hard-Max-Tokens", "0", "an integer from 1 to 10000000"),
        ("X-Offload-Hard-Max-Tokens", "1e9", "an integer from 1 to 10000000"),
        # optional now (unset: a default that follows the trigger), but never unset by a header
        ("X-Offload-Max-Tool-Message-Tokens", "null", "an integer from 1 to 10000000"),
        ("X-Offload-Max-Tool-Message-Tokens", "None", "an integer from 1 to 10000000"),
        ("X-Offload-Max-Tool-Message-Tokens", "", "an integer from 1 to 10000000"),
        ("X-Offload-Max-Tool-Message-Tokens", "0", "an integer from 1 to 10000000"),
        ("X-Offload-Max-Tool-Message-Tokens", "6000.5", "an integer from 1 to 10000000"),
        ("X-Offload-Max-Tool-Message-Tokens", "9" * 5000, "longer than 256 characters"),
        ("X-Offload-Max-Fresh-Tool-Message-Tokens", "0", "an integer from 1 to 10000000"),
        ("X-Offload-Max-Fresh-Tool-Message-Tokens", "off", "an integer from 1 to 10000000"),
        ("X-Offload-Max-Fresh-Tool-Message-Tokens", "25000.5", "an integer from 1 to 10000000"),
        ("X-Offload-Max-Fresh-Tool-Message-Tokens", "10000001", "an integer from 1 to 10000000"),
    ],
)
def test_invalid_headers_name_the_header_and_the_range(header, value, expect):
    with pytest.raises(SettingsError) as info:  # the core's own error; the HTTP layer makes it a 400
        SettingsResolver({}).resolve({header: value})
    assert info.value.param == header
    assert header in info.value.message and expect in info.value.message


def test_server_caps_what_headers_may_ask():
    resolver = SettingsResolver({}, header_caps={"max_reload_rounds": 3})
    assert resolver.resolve({"X-Offload-Max-Reload-Rounds": "3"}).max_reload_rounds == 3
    with pytest.raises(SettingsError) as info:
        resolver.resolve({"X-Offload-Max-Reload-Rounds": "9"})
    assert "at most 3" in info.value.message


def test_unknown_offload_headers_are_ignored():
    assert SettingsResolver({}).resolve({"X-Offload-Something-New": "1"}).mode == "auto"


def test_header_names():
    assert header_name("max_tool_message_tokens") == "X-Offload-Max-Tool-Message-Tokens"


@pytest.mark.parametrize(
    ("headers", "limit"),
    [
        ({}, 6000),  # the default, a third of 18000
        ({"X-Offload-Max-Total-Tokens": "9000"}, 3000),  # unset: follows a smaller trigger
        ({"X-Offload-Max-Total-Tokens": "3"}, 1),
        ({"X-Offload-Max-Total-Tokens": "2"}, 1),  # a third rounds to 0: the least, as 3 gives
        ({"X-Offload-Max-Total-Tokens": "0"}, 1),
        ({"X-Offload-Max-Total-Tokens": "100000"}, 6000),  # never above the default
        ({"X-Offload-Max-Total-Tokens": "9000", "X-Offload-Max-Tool-Message-Tokens": "5000"}, 5000),  # set: as set
        ({"X-Offload-Max-Tool-Message-Tokens": "20000"}, 20000),
    ],
)
def test_tool_result_limit_follows_a_smaller_trigger_unless_set(headers, limit):
    assert SettingsResolver({}).resolve(headers).tool_result_limit() == limit


def test_tool_result_limit_set_by_the_server_or_a_tenant(tmp_path):
    tenants = tmp_path / "tenants.toml"
    tenants.write_text("[tenants.acme]\nmax_tool_message_tokens = 700\n")
    resolver = SettingsResolver({"max_tool_message_tokens": 1500}, load_tenants_file(tenants))
    assert resolver.resolve({}).tool_result_limit() == 1500
    assert resolver.resolve({}, tenant="acme").tool_result_limit() == 700


def test_the_holdout_is_the_operators_a_header_may_only_repeat_it(tmp_path):
    tenants = tmp_path / "tenants.toml"
    tenants.write_text("[tenants.trial]\nholdout = 0.25\n")
    resolver = SettingsResolver({"holdout": 0.1}, load_tenants_file(tenants))
    assert resolver.resolve({}).holdout == 0.1
    assert resolver.resolve({}, tenant="trial").holdout == 0.25
    assert resolver.resolve({"X-Offload-Holdout": "0.25"}, tenant="trial").holdout == 0.25  # the same: accepted
    assert resolver.resolve({"X-Offload-Holdout": " 0.100 "}).holdout == 0.1
    for value in ("0", "0.5", "1", "-0.1", "nan", "inf", "lots", ""):
        with pytest.raises(SettingsError) as err:
            resolver.resolve({"X-Offload-Holdout": value})
        assert err.value.param == "X-Offload-Holdout"
    with pytest.raises(SettingsError, match="cannot change"):
        resolver.resolve({"X-Offload-Holdout": "0.2"})
    with pytest.raises(SettingsError, match="from 0 to below 1"):
        resolver.resolve({"X-Offload-Holdout": "1"})


@pytest.mark.parametrize("value", [1.0, -0.1, 2])
def test_a_holdout_out_of_range_in_the_tenants_file_fails_at_startup(tmp_path, value):
    tenants = tmp_path / "tenants.toml"
    tenants.write_text(f"[tenants.trial]\nholdout = {value}\n")
    with pytest.raises(ValueError, match="holdout"):
        load_tenants_file(tenants)


# `resolve_settings`: the one function that makes a request's settings (server default ← tenant ← header)


def test_resolve_settings_takes_the_header_over_the_tenant_over_the_default():
    from proxy.core.settings import OffloadSettings, resolve_settings

    defaults = OffloadSettings(max_total_tokens=30_000, keep_images=5)
    tenant = {"max_total_tokens": 5000, "mode": "compact", "api_keys": ["sk-proxy-ignored-0123"]}
    s = resolve_settings(defaults, {"x-offload-max-total-tokens": " 7000 "}, tenant=tenant)
    assert (s.max_total_tokens, s.mode, s.keep_images) == (7000, "compact", 5)
    assert resolve_settings(defaults, {}, tenant=tenant).max_total_tokens == 5000
    assert resolve_settings(defaults, {}) == defaults


def test_resolve_settings_reads_only_offload_headers_naming_a_setting():
    from proxy.core.settings import OffloadSettings, header_settings, resolve_settings

    headers = {"X-Offload-Mode": "off", "X-Offload-Upstream": "h", "Mode": "compact", "X-Offload-Nope": "1"}
    assert header_settings(headers) == {"mode": "off"}
    assert resolve_settings(OffloadSettings(), headers).mode == "off"


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ({"X-Offload-Keep-Images": "9" * 300}, "Header X-Offload-Keep-Images is longer than 256 characters."),
        (
            {"X-Offload-Keep-Images": "many"},
            "Invalid header X-Offload-Keep-Images: 'many'; it must be an integer from 0 to 100000.",
        ),
        (
            {"X-Offload-Max-Reload-Rounds": "9"},
            "Invalid header X-Offload-Max-Reload-Rounds: '9'; this server allows at most 3.",
        ),
        ({"X-Offload-Holdout": "0.5"}, "Header X-Offload-Holdout cannot change this server's value (0.0)"),
    ],
)
def test_resolve_settings_refuses_a_header_naming_it(headers, message):
    from proxy.core.settings import OffloadSettings, resolve_settings

    with pytest.raises(SettingsError) as info:
        resolve_settings(OffloadSettings(), headers, caps={"max_reload_rounds": 3})
    assert info.value.message.startswith(message) and info.value.param == next(iter(headers))


def test_the_resolver_resolves_with_what_it_holds(tmp_path):
    from proxy.core.settings import resolve_settings

    resolver = SettingsResolver({"keep_recent": 4}, {"acme": {"mode": "compress"}}, {"max_reload_rounds": 2})
    headers = {"X-Offload-Max-Reload-Rounds": "2"}
    assert resolver.resolve(headers, tenant="acme") == resolve_settings(
        resolver.defaults, headers, tenant={"mode": "compress"}, caps={"max_reload_rounds": 2}
    )
    assert resolver.resolve({}, tenant="unknown") == resolver.defaults


# ==================== header names
# Unknown `X-Offload-*` request headers: which are unknown, the known one closest to each, and
# the bounds on what a client can make the proxy do with them.


def test_the_issues_example_names_both_settings_it_may_mean():
    found = unknown_headers(["X-Offload-Max-Tokens"])
    assert found is not None and set(found.named[0].closest) == {
        "X-Offload-Max-Total-Tokens",
        "X-Offload-Hard-Max-Tokens",
    }
    assert found.warning() == (
        "unknown header X-Offload-Max-Tokens ignored (did you mean X-Offload-Hard-Max-Tokens "
        "or X-Offload-Max-Total-Tokens?)"
    )
    assert found.labels() == {"X-Offload-Hard-Max-Tokens": 1}  # one count, under the closest


@pytest.mark.parametrize(
    ("sent", "meant"),
    [
        ("x-offload-max-total-token", "X-Offload-Max-Total-Tokens"),
        ("X-Offload-MaxTotalTokens", "X-Offload-Max-Total-Tokens"),
        ("X-Offload-Keep-Recnt", "X-Offload-Keep-Recent"),
        ("X-Offload-Modes", "X-Offload-Mode"),
        ("X-Offload-Upstreams", "X-Offload-Upstream"),
        ("X-Offload-Sesion", "X-Offload-Session"),
        ("X-Offload-Max-Reload-Round", "X-Offload-Max-Reload-Rounds"),
        ("X-Offload-Context_Managment", "X-Offload-Context-Management"),
    ],
)
def test_a_misspelt_header_is_named_with_the_one_meant(sent, meant):
    found = unknown_headers([sent])
    assert found is not None and found.named[0].closest[0] == meant
    shown = "-".join(part.capitalize() for part in sent.split("-"))  # as the documentation writes names
    assert found.warning().startswith(f"unknown header {shown} ignored (did you mean {meant}")
    assert found.labels() == {meant: 1}


def test_a_header_close_to_none_says_so():
    found = unknown_headers(["X-Offload-Anything"])
    assert found is not None and found.named[0].closest == ()
    assert found.warning() == "unknown header X-Offload-Anything ignored (not an X-Offload-* setting)"
    assert found.labels() == {NO_MATCH: 1}


def test_every_header_the_resolver_reads_is_known():
    """Each setting in any case, with `-` or `_` between its words (the resolver reads both), and
    the upstream header; other headers are not the proxy's business."""
    names = [header_name(f) for f in SETTING_FIELDS]
    names += [n.lower() for n in names] + [n.upper() for n in names] + [n.replace("-", "_") for n in names[:3]]
    names = [n if n.lower().startswith("x-offload-") else "X-Offload-" + n[10:] for n in names]
    names += ["X-Offload-Upstream", "authorization", "content-type", "x-request-id", "openai-beta"]
    assert unknown_headers(names) is None
    assert set(KNOWN) == {*(header_name(f) for f in SETTING_FIELDS), "X-Offload-Upstream"}


def test_the_resolver_applies_none_of_an_unknown_one():
    """What makes the warning needed: a misspelt setting changes nothing."""
    assert SettingsResolver({}).resolve({"X-Offload-Max-Tokens": "5"}).max_total_tokens == 18_000


def test_each_name_is_said_once_whatever_its_case():
    found = unknown_headers(["X-Offload-Foo", "x-offload-foo", "X-OFFLOAD-FOO", "X-Offload-Bar"])
    assert found is not None and [h.name for h in found.named] == ["X-Offload-Foo", "X-Offload-Bar"]
    assert found.more == 0


def test_a_thousand_unknown_headers_name_eight_and_count_the_rest():
    found = unknown_headers([f"X-Offload-Junk-{i}" for i in range(1000)])
    assert found is not None and len(found.named) == MAX_NAMED and found.more == 1000 - MAX_NAMED
    assert sum(found.labels().values()) == 1000 and found.labels()[UNMATCHED] == 1000 - MAX_NAMED
    assert found.warning().endswith(f"; {1000 - MAX_NAMED} more unknown X-Offload-* headers ignored")
    assert len(found.warning()) < 1200


def test_a_long_name_is_clipped_before_it_is_matched_or_shown(monkeypatch):
    seen: list[str] = []
    real = settings.difflib.get_close_matches

    def spy(word, *args, **kwargs):
        seen.append(word)
        return real(word, *args, **kwargs)

    monkeypatch.setattr(settings.difflib, "get_close_matches", spy)
    found = unknown_headers(["X-Offload-" + "a" * 50_000])
    assert found is not None
    assert len(seen) == 1 and len(seen[0]) == MAX_NAME  # difflib never sees the 50 KB
    assert found.named[0].name == "X-Offload-A" + "a" * (MAX_NAME - len("X-Offload-A")) + "..."
    assert len(found.warning()) < 200


def test_label_values_are_bounded_whatever_the_names():
    labels: set[str] = set()
    for i in range(300):
        found = unknown_headers([f"X-Offload-{chr(65 + i % 26) * (i % 40 + 1)}-{i}", f"X-Offload-Max-Tok{i}"])
        assert found is not None
        labels |= set(found.labels())
    assert labels <= {*KNOWN, NO_MATCH, UNMATCHED}


def test_a_name_is_shown_as_printable_ascii():
    found = unknown_headers(["X-Offload-Caf\xe9\x7f"])
    assert found is not None and found.named[0].name == "X-Offload-Caf??"
    assert unknown_headers(["x-offload-max-tokens"]).named[0].name == "X-Offload-Max-Tokens"  # type: ignore[union-attr]
    assert found.warning().isascii()


def test_closest_of_a_prefix_alone_is_none():
    assert closest("x-offload-") == ()


# ==================== holdout
# The holdout's arms: stable, near the fraction asked, apart per tenant.


def test_the_arm_is_a_function_of_the_session_alone():
    assert arm("t1", "s-42", 0.5) == arm("t1", "s-42", 0.5)
    assert arm("t1", "s-42", 0.0) is None and arm("t1", None, 0.5) is None and arm("t1", "", 0.5) is None
    assert arm("t1", "s-42", 1.0) == "control"


def test_the_control_share_is_near_the_fraction_and_grows_with_it():
    sessions = [f"session-{i}" for i in range(20_000)]
    share = sum(arm("t1", s, 0.1) == "control" for s in sessions) / len(sessions)
    assert 0.09 < share < 0.11
    # a session in control at 0.1 stays in control at 0.2: raising the holdout moves sessions one way
    assert all(arm("t1", s, 0.2) == "control" for s in sessions if arm("t1", s, 0.1) == "control")


def test_tenants_and_salts_draw_their_own_split():
    sessions = [f"s{i}" for i in range(2000)]
    a = [arm("t1", s, 0.5) for s in sessions]
    assert a != [arm("t2", s, 0.5) for s in sessions]
    assert a != [arm("t1", s, 0.5, salt="new split") for s in sessions]
    assert all(0 <= position("t", s) < 1 for s in sessions)
