"""The dashboard in a real headless Chromium, against the real server, after real traffic sent
through the pipeline with the openai SDK: the page loads without console errors, its headline
numbers are the JSON API's, a session drills down to its turns, a tenant's key sees its own
tenant only, it refreshes itself without reloading, client strings stay text, and 10,000
sessions are paged. Screenshots land in .cache/screenshots/."""

from __future__ import annotations

import asyncio
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx2
import openai
import pytest
from playwright.sync_api import expect

from proxy.offload.tenant import namespace_for
from proxy.stats._counters import PriceTable, Turn
from proxy.stats._recorder import Recorder
from proxy.store.redis import RedisStore
from proxy.store.sealing import Sealer
from tests.harness.browser import open_page, screenshot
from tests.harness.history import agent_history

ADMIN = "admin-token-for-dashboard-tests"
KEY_A, KEY_B = "pk-dash-team-a-0001", "pk-dash-team-b-0002"
XSS_MODEL = "<img src=x onerror=window.__xss=1>"


def tenants_file(tmp_path: Path, **keys: str) -> Path:
    path = tmp_path / "tenants.toml"
    path.write_text("".join(f'[tenants.{name}]\napi_keys = ["{key}"]\n' for name, key in keys.items()))
    return path


def sdk_turn(url: str, key: str, history: list, *, session: str, model: str = "gpt-4o") -> None:
    """One chat completion through the openai SDK, offloading above 1,000 tokens."""
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=30)
    client.chat.completions.create(
        model=model,
        messages=history,
        extra_headers={"X-Offload-Max-Total-Tokens": "1000", "X-Offload-Session": session},
    )


def stats_when(url: str, token: str, requests: int) -> dict:
    """The last hour's stats once the recorder has flushed `requests` turns (about a second after)."""
    deadline = time.monotonic() + 10
    while (body := api(url, "/v1/offload/stats", token, window="1h"))["totals"]["requests"] < requests:
        assert time.monotonic() < deadline, body["totals"]
        time.sleep(0.2)
    return body


def ns(name: str) -> str:
    return namespace_for("tenant", [name], None)


def api(url: str, path: str, token: str, **params) -> dict:
    r = httpx2.get(f"{url}{path}", params=params, headers={"authorization": f"Bearer {token}"}, timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


# the page's own formatting (proxy/http/static/dashboard.js)
def fmt_int(v) -> str:
    return "–" if v is None else f"{round(v):,}"


def fmt_pct(v) -> str:
    return "–" if v is None else f"{v * 100:.1f}%"


def fmt_usd(v) -> str:
    return "–" if v is None else f"${v:.{4 if 0 < abs(v) < 1 else 2}f}"


def loads(page) -> int:
    return int(page.evaluate("() => Number(document.body.dataset.loaded || 0)"))


def wait_loaded(page, after: int = 0) -> int:
    """Until the page has drawn the API's answers more than `after` times."""
    page.wait_for_function(f"() => Number(document.body.dataset.loaded || 0) > {after}", timeout=15_000)
    return loads(page)


def wait_shown(page, selector: str, text: str | re.Pattern[str]) -> None:
    """Until `selector` shows `text` (a pattern: matches it). After a click, a load alone says
    nothing: the page refreshes itself every 5 s, and a refresh under way when the click came
    completes (and counts) before the one that draws the view asked for."""
    expect(page.locator(selector)).to_have_text(text, timeout=15_000)


def scope_of(label: str) -> re.Pattern[str]:
    """The header's scope once a tenant is open (its "All tenants" button beside the name)."""
    return re.compile("^" + re.escape(f"Tenant {label}"))


def sign_in(page, token: str) -> None:
    page.fill("#token", token)
    page.click("#signin button[type=submit]")
    wait_loaded(page)


def card(page, field: str) -> str:
    return page.inner_text(f'#headline .card[data-field="{field}"] .value')


def column(page, table: str, index: int) -> list[str]:
    return page.locator(f"#{table} tbody tr td:nth-child({index})").all_inner_texts()


@pytest.fixture(scope="module")
def site(make_proxy, tmp_path_factory):
    """A proxy with two tenants and an admin token, and traffic: team-a two sessions of 3 turns
    (one with a model name written as HTML), team-b one of 2; compaction on most turns."""
    tmp = tmp_path_factory.mktemp("dashboard")
    with make_proxy(admin_token=ADMIN, tenants_file=tenants_file(tmp, **{"dash-a": KEY_A, "dash-b": KEY_B})) as url:
        for steps in (2, 4, 6):
            sdk_turn(url, KEY_A, agent_history(steps=steps), session="a-build")
            sdk_turn(
                url,
                KEY_A,
                agent_history(steps=steps, system="You review code."),
                session="a-review",
                model=XSS_MODEL if steps == 6 else "gpt-4o",
            )
        for steps in (3, 5):
            sdk_turn(url, KEY_B, agent_history(steps=steps), session="b-secret-run")
        stats_when(url, ADMIN, 8)
        yield url


def test_loads_without_console_errors_and_headline_equals_the_api(site, chromium):
    page, console = open_page(chromium, f"{site}/dashboard#window=1h")
    assert page.locator("#signin").is_visible() and not page.locator("#board").is_visible()
    assert page.locator("#windows").is_hidden() and page.locator("#signout").is_hidden()
    sign_in(page, ADMIN)
    stats = api(site, "/v1/offload/stats", ADMIN, window="1h")
    totals = stats["totals"]
    assert totals["requests"] == 8 and totals["tokens_saved"] > 0
    assert card(page, "tokens_saved") == fmt_int(totals["tokens_saved"])
    assert card(page, "cost_saved_usd") == fmt_usd(totals["cost_saved_usd"])
    assert card(page, "forwarded_ratio") == fmt_pct(totals["forwarded_ratio"])
    assert card(page, "prefix_reuse") == fmt_pct(totals.get("prefix_reuse"))
    assert card(page, "reload_rate") == fmt_pct(totals["reload_rate"])
    assert card(page, "requests") == fmt_int(totals["requests"])
    assert page.inner_text("#scope") == "All tenants"
    # the tenants table: both tenants, their requests as the API counts them
    names = column(page, "tenants-table", 1)
    assert sorted(names) == ["dash-a", "dash-b"]
    rows = {r["name"]: r["totals"] for r in stats["tenants"]}
    assert column(page, "tenants-table", 2) == [fmt_int(rows[n]["requests"]) for n in names]
    assert page.locator("#chart-tokens svg polyline").count() == 2  # raw and forwarded
    assert page.locator("#chart-actions svg rect.bar").count() >= 1
    assert stats["viewer"] == "admin" and stats["health"]["store"] is True
    assert "reachable" in page.inner_text("#health-list") and "Summary jobs running" in page.inner_text("#health-list")
    print("screenshot:", screenshot(page, "dashboard-admin-1280"))
    assert console.errors == []


def test_reads_well_on_a_phone(site, chromium):
    page, console = open_page(chromium, f"{site}/dashboard#window=1h", width=390, height=844)
    sign_in(page, ADMIN)
    overflow = page.evaluate("() => document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0  # wide tables scroll inside their panel, the page never sideways
    assert page.locator('#headline .card[data-field="tokens_saved"]').is_visible()
    # the tables keep the columns that matter most and fit the width without scrolling
    widths = page.evaluate(
        "() => [...document.querySelectorAll('.table-wrap')].map(w => [w.parentElement.id, w.scrollWidth, w.clientWidth])"
    )
    assert all(scroll <= client for _, scroll, client in widths), widths
    assert page.locator("#tenants-table th", has_text="Fwd / raw").is_visible()
    assert page.locator("#tenants-table th", has_text="Saved (est.)").is_hidden()
    print("screenshot:", screenshot(page, "dashboard-phone-390"))
    assert console.errors == []


def test_drill_down_from_tenant_to_session(site, chromium):
    page, console = open_page(chromium, f"{site}/dashboard#window=1h")
    sign_in(page, ADMIN)
    page.locator("#tenants-table tbody tr", has_text="dash-a").click()
    wait_shown(page, "#scope", scope_of("dash-a"))
    expect(page.locator("#sessions-table tbody tr")).to_have_count(2, timeout=15_000)  # drawn after the scope
    assert page.locator("#tenants").is_hidden()
    assert sorted(column(page, "sessions-table", 1)) == ["a-build", "a-review"]
    page.locator("#sessions-table tbody tr", has_text="a-build").click()
    wait_shown(page, "#session-id", "a-build")  # the whole session view is drawn at once
    detail = api(site, "/v1/offload/sessions/a-build", ADMIN, tenant="dash-a")
    assert page.inner_text("#session-id") == "a-build"
    turns = detail["data"]
    assert len(turns) == 3
    # newest first in the table: raw and forwarded tokens of each turn as the API has them
    assert column(page, "turns-table", 6) == [fmt_int(t["tokens_before"]) for t in reversed(turns)]
    assert column(page, "turns-table", 7) == [fmt_int(t["tokens_after"]) for t in reversed(turns)]
    assert column(page, "turns-table", 5) == [t["action"] for t in reversed(turns)]
    assert page.locator("#chart-session svg polyline").count() == 2
    assert "session=a-build" in page.url  # the view survives a reload
    page.reload()
    wait_loaded(page)
    assert page.inner_text("#session-id") == "a-build"
    print("screenshot:", screenshot(page, "dashboard-session"))
    assert console.errors == []


def test_a_tenant_key_sees_its_own_tenant_only(site, chromium):
    # even when the address names the other tenant and its session
    page, console = open_page(chromium, f"{site}/dashboard#window=1h&tenant={ns('dash-b')}&session=b-secret-run")
    sign_in(page, KEY_A)
    mine = api(site, "/v1/offload/stats", KEY_A, window="1h")
    assert mine["tenant"] == ns("dash-a") and mine["totals"]["requests"] == 6 and mine["viewer"] == "tenant"
    assert "scheduler" not in mine["health"] and "recorder" not in mine  # the worker's state is the admin's
    assert page.inner_text("#scope") == "Tenant dash-a"
    assert card(page, "requests") == "6"
    assert page.locator("#tenants").is_hidden()
    assert sorted(column(page, "sessions-table", 1)) == ["a-build", "a-review"]
    assert page.locator("#session").is_hidden()
    assert "Summary jobs running" not in page.inner_text("#health-list")
    text = page.inner_text("body")
    assert "dash-b" not in text and "b-secret-run" not in text
    # the page's own token cannot read the other tenant through the API either
    status = page.evaluate(
        """async (tenant) => (await fetch('/v1/offload/sessions?tenant=' + tenant,
        {headers: {Authorization: 'Bearer ' + sessionStorage.getItem('offload-dashboard-token')}})).status""",
        ns("dash-b"),
    )
    assert status == 403
    # the browser itself logs the two refused loads (the other's session: 404, the fetch above: 403)
    refused = sorted(text.rsplit("status of ", 1)[-1] for _, text in console.errors)
    assert refused == ["403 (Forbidden)", "404 (Not Found)"]


def test_client_strings_are_shown_as_text_never_run(site, chromium):
    page, console = open_page(chromium, f"{site}/dashboard#window=1h&session=a-review")
    sign_in(page, KEY_A)
    assert XSS_MODEL in column(page, "sessions-table", 8)[column(page, "sessions-table", 1).index("a-review")]
    assert XSS_MODEL in column(page, "turns-table", 4)
    assert page.locator("#board img").count() == 0
    assert page.evaluate("() => window.__xss") is None
    assert console.errors == []


def test_a_wrong_token_is_refused_with_the_api_message(make_proxy, tmp_path, chromium):
    """Where the proxy holds the upstream key, only its proxy keys (and the admin token) open the page."""
    with make_proxy(
        admin_token=ADMIN,
        upstream_api_key="sk-held-by-the-proxy",
        tenants_file=tenants_file(tmp_path, **{"dash-a": KEY_A}),
    ) as url:
        page, console = open_page(chromium, f"{url}/dashboard")
        page.fill("#token", "pk-not-a-key")
        page.click("#signin button[type=submit]")
        page.wait_for_function("() => document.getElementById('signin-error').textContent.length > 0")
        assert page.locator("#board").is_hidden()
        assert "key" in page.inner_text("#signin-error").lower()
        assert page.evaluate("() => sessionStorage.getItem('offload-dashboard-token')") is None
        # the browser logs the refused load itself; the page adds no error of its own
        assert [text.rsplit("status of ", 1)[-1] for _, text in console.errors] == ["401 (Unauthorized)"]
        sign_in(page, KEY_A)  # and the right key opens it
        assert page.inner_text("#scope") == "Tenant dash-a"


def test_it_refreshes_itself_without_reloading(site, chromium):
    page, console = open_page(chromium, f"{site}/dashboard#window=1h")
    sign_in(page, KEY_B)
    assert card(page, "requests") == "2"
    page.evaluate("() => { window.__same_page = true; }")
    sdk_turn(site, KEY_B, agent_history(steps=4), session="b-secret-run")
    page.wait_for_function(
        "() => document.querySelector('#headline .card[data-field=requests] .value').textContent === '3'",
        timeout=20_000,
    )
    assert page.evaluate("() => window.__same_page") is True
    assert console.errors == []


def test_ten_thousand_sessions_are_paged(make_proxy, redis_url, tmp_path, chromium):
    """10,000 sessions of one tenant written as the recorder writes them; the page shows 25 at a time."""
    name = f"dash-big-{int(time.time())}"
    key = "pk-dash-big-0003"

    async def seed() -> None:
        store = RedisStore(redis_url)
        recorder = Recorder(PriceTable(None), 14 * 86400, max_queue=20_000)
        recorder.start(store, Sealer(None))
        now = time.time()
        for i in range(10_000):
            recorder.record(
                Turn(
                    namespace=ns(name),
                    session=f"s-{i:05d}",
                    time=now - 5 + i / 10_000,
                    route="chat",
                    model="gpt-4o",
                    status=200,
                    stream=False,
                    tokens_before=5000 + i,
                    tokens_after=1000,
                    action="compact",
                    refs=1,
                )
            )
            if i % 1000 == 999:  # written as they come (stop's flush is bounded in time: a loaded machine
                await recorder.flush()  # took over 120 s for 10,000 new sessions at once)
        await recorder.stop(timeout=120)
        await store.close()
        assert recorder.snapshot().recorded == 10_000, recorder.snapshot()

    with ThreadPoolExecutor(1) as pool:  # Playwright's loop runs in this thread
        pool.submit(asyncio.run, seed()).result()
    with make_proxy(redis_url=redis_url, tenants_file=tenants_file(tmp_path, **{name: key})) as url:
        listing = api(url, "/v1/offload/sessions", key, limit=1)
        assert listing["total"] == 10_000
        page, console = open_page(chromium, f"{url}/dashboard#window=1h")
        sign_in(page, key)
        assert page.locator("#sessions-table tbody tr").count() == 25
        assert page.inner_text("#page") == "1–25 of 10,000"
        assert column(page, "sessions-table", 1)[0] == "s-09999"  # the most recent first
        page.click("#next")
        wait_shown(page, "#page", "26–50 of 10,000")  # drawn with the table, after it
        assert column(page, "sessions-table", 1)[0] == "s-09974"
        page.click("#prev")
        wait_shown(page, "#page", "1–25 of 10,000")
        assert page.locator("#prev").is_disabled()
        print("screenshot:", screenshot(page, "dashboard-10000-sessions"))
        assert console.errors == []


def test_links_the_api_refuses_fall_back_to_a_view_that_loads(make_proxy, tmp_path, chromium):
    """What the address holds is the visitor's to edit: an unknown tenant or an offset past the
    API's range left the page on an error with no way back but editing the address; a session id
    with `/` (X-Offload-Session admits it) opens, and the admin stays signed in."""
    with make_proxy(admin_token=ADMIN, tenants_file=tenants_file(tmp_path, **{"dash-a": KEY_A})) as url:
        sdk_turn(url, KEY_A, agent_history(steps=2), session="team/run-1")
        for i in range(10):
            sdk_turn(url, KEY_A, agent_history(steps=2), session="zoo", model=f"model-{i}")
        stats_when(url, ADMIN, 11)
        time.sleep(1.5)  # the sessions are written after the buckets
        page, console = open_page(chromium, f"{url}/dashboard#window=1h&tenant=nobody&session=x")
        sign_in(page, ADMIN)
        assert page.inner_text("#scope") == "All tenants" and column(page, "tenants-table", 1) == ["dash-a"]
        assert "No tenant 'nobody'" in page.inner_text("#error") and "tenant=nobody" not in page.url
        page, console = open_page(chromium, f"{url}/dashboard#window=1h&tenant={ns('dash-a')}&offset=99999999999")
        sign_in(page, ADMIN)
        assert sorted(column(page, "sessions-table", 1)) == ["team/run-1", "zoo"]
        assert "offset" in page.inner_text("#error") and "offset=" not in page.url
        models = column(page, "sessions-table", 8)[column(page, "sessions-table", 1).index("zoo")]
        assert models.endswith("+2 more") and models.count("model-") == 8
        page.locator("#sessions-table tbody tr", has_text="team/run-1").click()
        wait_shown(page, "#session-id", "team/run-1")
        assert page.locator("#board").is_visible()
        assert page.evaluate("() => sessionStorage.getItem('offload-dashboard-token')") == ADMIN
        assert [text for _, text in console.errors if "status of 400" not in text] == []


def test_a_key_with_nothing_recorded_is_told_so(site, chromium):
    """Where the proxy holds no upstream key any key is a tenant's own: a mistyped admin token opens
    an empty tenant, and the page says what that likely means."""
    page, console = open_page(chromium, f"{site}/dashboard#window=1h")
    sign_in(page, ADMIN + "-typo")
    assert page.locator("#hint").is_visible() and "mistyped admin token" in page.inner_text("#hint")
    assert page.inner_text("#hint strong") == "No traffic recorded for this key yet — check the token."
    assert card(page, "requests") == "0"
    page.click("#signout")
    sign_in(page, KEY_A)
    assert page.locator("#hint").is_hidden()
    assert console.errors == []


def test_a_truncated_tenants_table_says_so(make_proxy, tmp_path, chromium, monkeypatch):
    from proxy.stats import _reader as reader

    monkeypatch.setattr(reader, "MAX_TENANT_ROWS", 1)
    with make_proxy(
        admin_token=ADMIN, tenants_file=tenants_file(tmp_path, **{"dash-a": KEY_A, "dash-b": KEY_B})
    ) as url:
        sdk_turn(url, KEY_A, agent_history(steps=4), session="a")
        sdk_turn(url, KEY_B, agent_history(steps=2), session="b")
        stats_when(url, ADMIN, 2)
        page, console = open_page(chromium, f"{url}/dashboard#window=1h")
        sign_in(page, ADMIN)
        assert column(page, "tenants-table", 1) == ["dash-a"]
        assert "with most raw tokens; there were more" in page.inner_text("#tenants-table caption")
        assert console.errors == []


def test_what_you_pay_is_the_bill_the_upstream_reported(make_proxy, upstream, chromium):
    """The fake upstream reports a usage per answer (cache reads among it, and one answer with
    none): the cards and the What you pay table show the API's bill, which is that usage priced,
    and say that one turn reported no usage."""
    from starlette.responses import JSONResponse

    from tests.harness.servers import completion

    usages = iter(
        [
            {"prompt_tokens": 5000, "completion_tokens": 200, "prompt_tokens_details": {"cached_tokens": 4096}},
            {"prompt_tokens": 6000, "completion_tokens": 300, "prompt_tokens_details": {"cached_tokens": 4992}},
            None,
        ]
    )

    async def handler(request, rec):
        usage = next(usages)
        answer = {k: v for k, v in completion("hi").items() if k != "usage"}
        return JSONResponse({**answer, "usage": usage} if usage else answer)

    upstream.handler = handler
    key = f"sk-dash-bill-{time.time_ns()}"
    with make_proxy(admin_token=ADMIN) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=30)
        for _ in range(3):
            client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
        stats_when(url, ADMIN, 3)
        totals = api(url, "/v1/offload/stats", ADMIN, window="1h")["totals"]
        bill = totals["bill"]
        price = PriceTable().price("gpt-4o")
        expected = (1912 * price.input + 9088 * price.cached + 500 * price.output) / 1e6
        assert bill["tokens"]["cache_read"] == 9088 and bill["tokens"]["uncached"] == 1912
        assert bill["usd"]["total"] == round(expected, 6) and bill["turns_without_usage"] == 1

        page, console = open_page(chromium, f"{url}/dashboard#window=1h")
        sign_in(page, ADMIN)
        assert card(page, "cost_billed_usd") == fmt_usd(bill["usd"]["total"])
        assert card(page, "cost_saved_usd") == fmt_usd(totals["counterfactual"]["saved_usd"])
        assert "(est.)" in page.inner_text('#headline .card[data-field="cost_saved_usd"] .label').lower()
        rows = column(page, "bill-table", 1)
        assert rows == ["Uncached input", "Cache reads", "Writes 5 min", "Writes 1 h", "Output", "Total"]
        parts = ["uncached", "cache_read", "cache_write_5m", "cache_write_1h", "output", "total"]
        assert column(page, "bill-table", 2) == [
            fmt_int(bill["tokens"]["input"] + bill["tokens"]["output"] if p == "total" else bill["tokens"][p])
            for p in parts
        ]
        assert column(page, "bill-table", 3) == [fmt_usd(bill["usd"][p]) for p in parts]
        assert column(page, "bill-table", 6) == [fmt_usd(totals["counterfactual"]["usd"][p]) for p in parts]
        assert "1 turn (1 upstream answer) reported no usage" in page.inner_text("#bill-note")
        assert "gpt-4o" in page.inner_text("#bill-note")
        print("screenshot:", screenshot(page, "dashboard-bill-1280"))
        assert console.errors == []
