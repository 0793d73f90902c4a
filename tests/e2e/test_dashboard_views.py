"""The dashboard in headless Chromium where clients send their own provider keys: tenants are
named by their key's fingerprint (never more of the key), the default window fits the data, a
whole row opens (by click or Enter), and at phone width the header stays compact and a table
wider than the screen says it scrolls. Screenshots land in .cache/screenshots/."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from playwright.sync_api import expect

from proxy.offload.tenant import namespace_for
from proxy.stats._counters import PriceTable, Turn
from proxy.stats._recorder import Recorder
from proxy.store.redis import RedisStore
from proxy.store.sealing import Sealer
from tests.e2e.test_dashboard import (
    ADMIN,
    api,
    column,
    scope_of,
    sdk_turn,
    sign_in,
    stats_when,
    tenants_file,
    wait_loaded,
    wait_shown,
)
from tests.harness.browser import open_page, screenshot
from tests.harness.history import agent_history

PROJ = "sk-proj-" + "Hk3v" * 14 + "AbCd"
ANT = "sk-ant-api03-" + "Pw8n" * 14 + "WXYZ"
SHORT = "sk-short-0001"  # too short for a fingerprint: its hash
LONG_SESSIONS = [f"demo-fix-invoice-rounding-{f}" for f in ("chat", "responses", "anthropic")]  # alike but the end


@pytest.fixture(scope="module")
def keyed(make_proxy):
    """Client-key mode (no tenants file, no upstream key): three keys' traffic, fresh."""
    with make_proxy(admin_token=ADMIN) as url:
        sdk_turn(url, PROJ, agent_history(steps=2), session="proj-build")
        sdk_turn(url, PROJ, agent_history(steps=4), session="proj-review")
        sdk_turn(url, ANT, agent_history(steps=3), session="ant-run")
        sdk_turn(url, SHORT, agent_history(steps=2), session="short-run")
        for name in LONG_SESSIONS:
            sdk_turn(url, SHORT, agent_history(steps=1), session=name)
        stats_when(url, ADMIN, 4 + len(LONG_SESSIONS))
        time.sleep(1.2)  # the sessions are written after the buckets
        yield url


def window_on(page) -> str:
    return page.inner_text("#windows button.on")


def test_client_keys_show_as_their_fingerprint(keyed, chromium):
    page, console = open_page(chromium, f"{keyed}/dashboard")
    sign_in(page, ADMIN)
    short = namespace_for("credential", [SHORT], None)[:12]
    assert sorted(column(page, "tenants-table", 1)) == sorted(["sk-proj…AbCd", "sk-ant…WXYZ", short])
    text = page.inner_text("body")
    for key in (PROJ, ANT):
        assert key[:9] not in text and key[12:-4] not in text and key[-5:] not in text
    assert page.locator("#tenants .scroll-hint").is_hidden()  # it fits: no hint
    print("screenshot:", screenshot(page, "dashboard-client-keys"))
    page.locator("#tenants-table tbody tr", has_text="sk-proj…AbCd").click()
    wait_shown(page, "#scope", scope_of("sk-proj…AbCd"))
    expect(page.locator("#sessions-table tbody tr")).to_have_count(2, timeout=15_000)  # drawn after the scope
    assert sorted(column(page, "sessions-table", 1)) == ["proj-build", "proj-review"]
    page.click("#signout")
    sign_in(page, ANT)  # a tenant sees its own label, and no other
    # waited for, not read at once: the load count sign_in waits on did not restart at the sign-out
    wait_shown(page, "#scope", "Tenant sk-ant…WXYZ")
    assert "AbCd" not in page.inner_text("body") and short not in page.inner_text("body")
    assert console.errors == []


def test_the_default_window_fits_fresh_data(keyed, chromium):
    page, console = open_page(chromium, f"{keyed}/dashboard")
    sign_in(page, PROJ)
    assert window_on(page) == "15 m" and "window=15m" in page.url  # minutes old: not a sliver of 1 h or 24 h
    assert len(api(keyed, "/v1/offload/stats", PROJ, window="15m")["series"]) == 15  # a point a minute
    page.click('#windows button[data-window="24h"]')  # the visitor's choice stays
    page.wait_for_function("() => location.hash.includes('window=24h')")
    page.reload()
    wait_loaded(page)
    assert window_on(page) == "24 h"
    assert console.errors == []


def test_the_default_window_fits_older_data(make_proxy, redis_url, tmp_path, chromium):
    """Data half an hour old opens 1 h; hours old 24 h; days old (none today) 7 d; none at all 15 m."""
    stamp = int(time.time())
    names = {
        f"half-{stamp}": ("pk-dash-half-0007", 1800),
        f"hours-{stamp}": ("pk-dash-hours-0004", 3 * 3600),
        f"days-{stamp}": ("pk-dash-days-0005", 3 * 86400),
        f"none-{stamp}": ("pk-dash-none-0006", None),
    }

    async def seed() -> None:
        store = RedisStore(redis_url)
        recorder = Recorder(PriceTable(None), 14 * 86400)
        recorder.start(store, Sealer(None))
        for name, (_, age) in names.items():
            if age is not None:
                recorder.record(
                    Turn(
                        namespace=namespace_for("tenant", [name], None),
                        session="old",
                        time=time.time() - age,
                        route="chat",
                        model="gpt-4o",
                        status=200,
                        stream=False,
                        tokens_before=5000,
                        tokens_after=1000,
                        action="compact",
                    )
                )
        await recorder.stop(timeout=30)
        await store.close()

    with ThreadPoolExecutor(1) as pool:  # Playwright's loop runs in this thread
        pool.submit(asyncio.run, seed()).result()
    keys = {name: key for name, (key, _) in names.items()}
    with make_proxy(redis_url=redis_url, tenants_file=tenants_file(tmp_path, **keys)) as url:
        for name, expected in (
            (f"half-{stamp}", "1 h"),
            (f"hours-{stamp}", "24 h"),
            (f"days-{stamp}", "7 d"),
            (f"none-{stamp}", "15 m"),
        ):
            page, console = open_page(chromium, f"{url}/dashboard")
            sign_in(page, keys[name])
            assert window_on(page) == expected, name
            assert console.errors == []
        page, console = open_page(chromium, f"{url}/dashboard#window=30d")  # an address's window is kept
        sign_in(page, keys[f"hours-{stamp}"])
        assert window_on(page) == "30 d"


def test_a_whole_row_opens_by_click_or_enter(keyed, chromium):
    page, console = open_page(chromium, f"{keyed}/dashboard#window=1h")
    sign_in(page, ADMIN)
    row = page.locator("#tenants-table tbody tr", has_text="sk-ant…WXYZ")
    assert row.get_attribute("tabindex") == "0"
    row.locator("td").nth(3).click()  # a number cell, not the name
    wait_shown(page, "#scope", scope_of("sk-ant…WXYZ"))
    session_row = page.locator("#sessions-table tbody tr", has_text="ant-run")
    session_row.focus()  # waits for the row
    page.keyboard.press("Enter")
    wait_shown(page, "#session-id", "ant-run")
    assert page.locator("#session").is_visible()
    # Tab reaches the rows: from the page's first control to a row without a mouse
    page.focus("#session-close")
    for _ in range(12):
        page.keyboard.press("Shift+Tab")
        if page.evaluate("() => document.activeElement.matches('#sessions-table tr.clickable')"):
            break
    else:
        pytest.fail("no sessions row is reachable with the keyboard")
    print("screenshot:", screenshot(page, "dashboard-row-focused"))
    assert console.errors == []


def test_a_phone_has_a_compact_header_and_a_wide_table_says_it_scrolls(keyed, chromium):
    page, console = open_page(chromium, f"{keyed}/dashboard#window=1h", width=390, height=844)
    sign_in(page, ADMIN)
    header = page.evaluate("() => document.querySelector('header.bar').getBoundingClientRect().height")
    assert header <= 60, header
    for control in ("#windows", "#pause", "#signout", "#scope", "#updated"):
        assert page.locator(control).is_visible(), control
    overflow = page.evaluate("() => document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0  # the table scrolls inside its panel, never the page
    wrap = page.locator("#tenants .table-wrap")
    widths = wrap.evaluate("w => [w.scrollWidth, w.clientWidth]")
    assert widths[0] > widths[1], widths  # hash-like names: wider than a phone
    hint = page.locator("#tenants .scroll-hint")
    assert hint.is_visible() and hint.inner_text() == "scroll →"
    print("screenshot:", screenshot(page, "dashboard-phone-390-client-keys"))
    wrap.evaluate("w => { w.scrollLeft = w.scrollWidth; }")
    page.wait_for_function("() => !document.querySelector('#tenants .table-box').classList.contains('more')")
    assert hint.is_hidden()  # its end is in view
    assert page.locator("#health .scroll-hint").count() == 0
    page.locator("#tenants-table tbody tr", has_text="sk-proj…AbCd").click()  # the scope holds a button too
    wait_shown(page, "#scope", scope_of("sk-proj…AbCd"))  # the header, its button and the charts: drawn at once
    header = page.evaluate("() => document.querySelector('header.bar').getBoundingClientRect().height")
    assert header <= 60, header
    back = page.evaluate("""() => { const b = document.querySelector('#scope button').getBoundingClientRect();
        const s = document.querySelector('#scope').getBoundingClientRect(); return [b.width, b.right, s.right]; }""")
    assert back[0] > 40 and back[1] <= back[2] + 0.5 and back[1] <= 390, back  # whole, not cut by the name
    y_axis = page.locator('#chart-actions text.tick[text-anchor="end"]').evaluate_all(  # 2 turns: 0, 1, 2
        "ticks => ticks.map(t => t.textContent)"
    )
    assert len(set(y_axis)) == len(y_axis) and y_axis[0] == "0", y_axis
    page.locator("#sessions-table tbody tr", has_text="proj-review").click()
    wait_shown(page, "#session-id", "proj-review")
    page.evaluate("() => window.scrollTo(0, 0)")
    print("screenshot:", screenshot(page, "dashboard-phone-390-session"))
    page.click("#scope button")
    wait_shown(page, "#scope", "All tenants")
    assert console.errors == []


@pytest.mark.parametrize("width, shown", [(1280, 28), (390, 16)])
def test_long_session_ids_alike_but_their_end_stay_apart(keyed, chromium, width, shown):
    """The demo's three sessions differ by their end only: cut at the end they looked the same."""
    page, console = open_page(chromium, f"{keyed}/dashboard#window=1h", width=width, height=900)
    sign_in(page, SHORT)
    expect(page.locator("#sessions-table tbody tr")).to_have_count(4, timeout=15_000)
    names = column(page, "sessions-table", 1)
    long = [n for n in names if n != "short-run"]
    assert len(set(long)) == 3 and all(len(n) == shown and "…" in n for n in long), long
    assert sorted(n.rpartition("…")[2][-4:] for n in long) == ["chat", "nses", "opic"]
    for name in long:  # the cell is not cut further by its column
        cell = page.locator("#sessions-table tbody tr .link", has_text=name)
        assert cell.evaluate("c => c.scrollWidth <= c.clientWidth"), name
    row = page.locator("#sessions-table tbody tr", has_text=next(n for n in long if n.endswith("chat")))
    assert row.get_attribute("title") == "Open session demo-fix-invoice-rounding-chat"
    row.click()
    wait_shown(page, "#session-id", "demo-fix-invoice-rounding-chat")  # the whole id in the drill-down
    assert console.errors == []
