"""The statistics API's holdout section: many requests at once for one tenant's large comparison
compute it once (a bootstrap over thousands of sessions takes seconds of CPU)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from proxy.core.settings import SettingsResolver
from proxy.http import stats_api
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
