"""The dashboard's observed panel in headless Chromium: observe-mode traffic shows apart from
managed turns, what was sent and billed beside what would have been (estimates, said so)."""

from __future__ import annotations

import time

import openai
from playwright.sync_api import expect

from tests.e2e.test_dashboard import ADMIN, api, column, fmt_int, fmt_usd, sign_in
from tests.harness.browser import open_page, screenshot
from tests.harness.history import agent_history


def test_observed_traffic_is_shown_apart_with_what_it_would_have_saved(make_proxy, upstream, chromium):
    key = f"sk-dash-observed-{time.time_ns()}"
    with make_proxy(admin_token=ADMIN) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=30)
        page, console = open_page(chromium, f"{url}/dashboard#window=1h")
        sign_in(page, ADMIN)
        assert page.locator("#observed").is_hidden()  # nothing observed yet
        for _ in range(2):
            client.chat.completions.create(
                model="gpt-4o",
                messages=agent_history(steps=6, lines=200),
                extra_headers={
                    "X-Offload-Mode": "observe",
                    "X-Offload-Session": "watched",
                    "X-Offload-Max-Total-Tokens": "1500",
                },
            )
        deadline = time.monotonic() + 15
        while (totals := api(url, "/v1/offload/stats", ADMIN, window="1h")["totals"]).get("observed", {}).get(
            "requests", 0
        ) < 2:
            assert time.monotonic() < deadline, totals
            time.sleep(0.2)
        observed = totals["observed"]
        page.reload()  # signed in still
        page.wait_for_selector("#observed:not([hidden])")
        assert column(page, "observed-table", 1) == ["Requests", "Tokens", "Cost"]
        assert column(page, "observed-table", 2) == [
            fmt_int(2),
            fmt_int(observed["tokens_forwarded"]),
            fmt_usd(observed["bill"]["usd"]["total"]),
        ]
        assert column(page, "observed-table", 3)[1] == fmt_int(observed["tokens_would_forward"])
        note = page.inner_text("#observed-note")
        assert "as received" in note and "estimated" in note and fmt_int(observed["tokens_would_save"]) in note
        print("screenshot:", screenshot(page, "dashboard-observed-1280"))

        # a tenant whose traffic is all observed is in the admin's tenants table, and has a first request
        stats = api(url, "/v1/offload/stats", ADMIN, window="1h")
        [row] = stats["tenants"]
        assert row["totals"]["requests"] == 0 and row["totals"]["observed"]["requests"] == 2
        assert stats["first_seen"] is not None
        expect(page.locator("#tenants-table tbody tr")).to_have_count(1, timeout=15_000)
        page.locator("#tenants-table tbody tr").click()
        # its session counts its observed turns, each shown as observed with what went out
        expect(page.locator("#sessions-table tbody tr")).to_have_count(1, timeout=15_000)
        [listed] = api(url, "/v1/offload/sessions", ADMIN, tenant=row["tenant"])["data"]
        assert (listed["id"], listed["turns"], listed["observed"]["requests"]) == ("watched", 2, 2)
        page.locator("#sessions-table tbody tr").click()
        page.wait_for_selector("#session:not([hidden])")
        summary = page.inner_text("#session-summary")
        assert summary.startswith("2 turns (last 2 kept)") and "2 observed" in summary, summary
        detail = api(url, "/v1/offload/sessions/watched", ADMIN, tenant=row["tenant"])
        assert column(page, "turns-table", 1) == ["2", "1"]
        actions = column(page, "turns-table", 5)
        assert all(a.startswith("observed (would: ") for a in actions), actions
        turns = list(reversed(detail["data"]))
        assert column(page, "turns-table", 7) == [fmt_int(t["tokens_before"]) for t in turns]  # went out as received
        assert column(page, "turns-table", 8) == [fmt_int(t["tokens_after"]) for t in turns]  # would have
        assert all(t["tokens_after"] < t["tokens_before"] for t in turns)
        assert console.errors == []
