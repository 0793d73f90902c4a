"""Unknown `X-Offload-*` request headers: which are unknown, the known one closest to each, and
the bounds on what a client can make the proxy do with them."""

from __future__ import annotations

import pytest

from proxy.core import header_names
from proxy.core.header_names import KNOWN, MAX_NAME, MAX_NAMED, NO_MATCH, UNMATCHED, closest, unknown_headers
from proxy.core.settings import SETTING_FIELDS, SettingsResolver, header_name


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
    real = header_names.difflib.get_close_matches

    def spy(word, *args, **kwargs):
        seen.append(word)
        return real(word, *args, **kwargs)

    monkeypatch.setattr(header_names.difflib, "get_close_matches", spy)
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
