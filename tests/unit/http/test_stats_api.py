"""The statistics API's holdout section: many requests at once for one tenant's large comparison
compute it once (a bootstrap over thousands of sessions takes seconds of CPU). The dashboard's
files: served from a fixed set (no path reaches the disk), with a strict content security policy;
the page's script writes client strings as text only."""

from __future__ import annotations

import asyncio
import re
from types import SimpleNamespace

import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from proxy.core.settings import SettingsResolver
from proxy.http import stats_api
from proxy.http.stats_api import ASSETS, STATIC, Dashboard
from proxy.stats._holdout import SessionOutcome


def _request() -> SimpleNamespace:
    services = SimpleNamespace(settings_resolver=SettingsResolver({"holdout": 0.5}), store=None)
    return SimpleNamespace(
        scope={"state": {"admin": True}}, app=SimpleNamespace(state=SimpleNamespace(services=services))
    )


def test_concurrent_reads_of_a_large_comparison_compute_it_once(monkeypatch) -> None:
    calls = 0
    outcomes = [
        SessionOutcome(arm="control" if i % 2 else "managed", turns=1 + i % 3)
        for i in range(2 * stats_api.SMALL_COMPARISON)
    ]

    async def fake_outcomes(store, namespace, **_):
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.05)
        return outcomes, {"control": len(outcomes) // 2, "managed": len(outcomes) // 2}

    monkeypatch.setattr(stats_api, "holdout_outcomes", fake_outcomes)
    api = stats_api.StatsApi({})

    async def run() -> list[dict]:
        return list(await asyncio.gather(*(api.holdout(_request(), "a" * 32) for _ in range(8))))

    sections = asyncio.run(run())
    assert calls == 1
    assert all(s == sections[0] for s in sections)
    assert sections[0]["arms"]["control"]["sessions"] == stats_api.SMALL_COMPARISON


def test_a_failed_comparison_is_not_kept(monkeypatch) -> None:
    calls = 0

    async def failing(store, namespace, **_):
        nonlocal calls
        calls += 1
        raise RuntimeError("store down")

    monkeypatch.setattr(stats_api, "holdout_outcomes", failing)
    api = stats_api.StatsApi({})

    async def run() -> None:
        for _ in range(2):
            try:
                await api.holdout(_request(), "b" * 32)
            except RuntimeError:
                pass

    asyncio.run(run())
    assert calls == 2


def test_the_fraction_shown_is_that_of_whoever_reads_it(monkeypatch):
    """A sub-tenant's namespace (not in the tenants file's names) read by the admin shows the
    server's fraction, by the tenant its own entry's: one comparison kept does not show the other's."""
    outcomes = [SessionOutcome(arm="control" if i % 2 else "managed") for i in range(2 * stats_api.SMALL_COMPARISON)]

    async def fake_outcomes(store, namespace, **_):
        return outcomes, {"control": 1, "managed": 1}

    monkeypatch.setattr(stats_api, "holdout_outcomes", fake_outcomes)
    services = SimpleNamespace(
        settings_resolver=SettingsResolver({"holdout": 0.1}, {"team": {"holdout": 0.3}}), store=None
    )
    app = SimpleNamespace(state=SimpleNamespace(services=services))
    admin = SimpleNamespace(scope={"state": {"admin": True}}, app=app)
    tenant = SimpleNamespace(scope={"state": {}}, app=app, state=SimpleNamespace(caller=SimpleNamespace(tenant="team")))
    api = stats_api.StatsApi({})

    async def run() -> tuple[dict, dict]:
        return await api.holdout(admin, "c" * 32), await api.holdout(tenant, "c" * 32)

    by_admin, by_tenant = asyncio.run(run())
    assert (by_admin["fraction"], by_tenant["fraction"]) == (0.1, 0.3)


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(Starlette(routes=Dashboard().routes()))


def test_the_page_and_its_assets_are_served_with_a_strict_policy(client):
    page = client.get("/dashboard")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe" not in policy and "frame-ancestors 'none'" in policy
    assert page.headers["x-content-type-options"] == "nosniff" and page.headers["referrer-policy"] == "no-referrer"
    for name in ASSETS:
        r = client.get(f"/dashboard/{name}")
        assert r.status_code == 200 and r.content == (STATIC / name).read_bytes()
        assert r.headers["content-type"].startswith("text/css" if name.endswith(".css") else "text/javascript")
    assert client.head("/dashboard").status_code == 200


def test_everything_the_page_loads_is_served_from_here(client):
    html = client.get("/dashboard").text
    loaded = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert loaded and all(url == "data:," or url.removeprefix("/dashboard/") in ASSETS for url in loaded)
    assert "<script>" not in html and " style=" not in html  # nothing inline: the policy forbids it


@pytest.mark.parametrize(
    "path",
    [
        "/dashboard/index.html",
        "/dashboard/..%2fstats_api.py",
        "/dashboard/%2e%2e",
        "/dashboard/dashboard.js.map",
        "/dashboard/DASHBOARD.JS",
    ],
)
def test_other_names_are_not_found(client, path):
    r = client.get(path)
    assert r.status_code == 404
    assert r.headers.get("content-type", "").startswith("application/json") or r.text == "Not Found"
    assert "import" not in r.text  # never a file's source


def test_the_scripts_never_write_html_or_evaluate_strings():
    for name in ("dashboard.js", "charts.js"):
        source = (STATIC / name).read_text()
        for unsafe in (
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
            "new Function",
            'setAttribute("style"',
            "localStorage",
        ):
            assert unsafe not in source, (name, unsafe)
