"""Test harness: a real Redis, a fake OpenAI upstream and the proxy, all on loopback."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2

# respx (the upstream faked in unit tests) imports httpx and patches httpcore: aliased to httpx2 and
# httpcore2, the proxy's client, before anything imports them (so respx's pytest plugin, which would
# import httpx first, is off: `-p no:respx` in pyproject.toml).
httpx2.alias_httpx()

_shared_tiktoken = Path(__file__).resolve().parents[2] / "shared" / "tiktoken"
if _shared_tiktoken.is_dir():
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(_shared_tiktoken))

import openai  # noqa: E402
import pytest  # noqa: E402

from proxy.config import ServerSettings  # noqa: E402
from proxy.http.app import create_app  # noqa: E402
from tests.harness import parallel  # noqa: E402
from tests.harness.billing import ProviderCaches  # noqa: E402
from tests.harness.parallel import pytest_xdist_make_scheduler  # noqa: E402,F401  (scripts/test runs workers)
from tests.harness.prerequisites import pytest_terminal_summary  # noqa: E402,F401  (what did not run, and why)
from tests.harness.servers import FakeUpstream, RedisCluster, RedisProcess, ServerThread, env_redis_url  # noqa: E402


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """REDIS_URL if set, else a redis-server of our own on a free port."""
    if url := env_redis_url():
        yield url
        return
    server = RedisProcess().start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def private_redis() -> Iterator[RedisProcess]:
    """A redis-server of this test's own, always: for tests that wipe or restart it (never REDIS_URL's)."""
    server = RedisProcess().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def private_redis_url(private_redis) -> str:
    return private_redis.url


@pytest.fixture(scope="module")
def chromium():
    """A headless Chromium for the module's page tests (tests/harness/browser.py)."""
    from tests.harness.browser import browser  # Playwright: loaded by the page tests only

    with browser() as launched:
        yield launched


@pytest.fixture(scope="session")
def redis_cluster_url() -> Iterator[str]:
    """REDIS_CLUSTER_URL if set, else a 3-master cluster of our own on loopback."""
    if url := os.environ.get("REDIS_CLUSTER_URL"):
        yield url
        return
    cluster = RedisCluster().start()
    try:
        yield cluster.url
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def _fake_upstream_server() -> Iterator[tuple[FakeUpstream, ServerThread]]:
    fake = FakeUpstream()
    with ServerThread(fake.app()) as server:
        yield fake, server


@pytest.fixture
def upstream(_fake_upstream_server) -> Iterator[FakeUpstream]:
    fake, server = _fake_upstream_server
    fake.reset()
    fake.url = server.url  # type: ignore[attr-defined]
    yield fake
    fake.reset()


@pytest.fixture
def caches(upstream) -> ProviderCaches:
    """The fake upstream billing as a provider does, its prompt cache on a clock the test moves
    (`tests.harness.billing`)."""
    upstream.caches = ProviderCaches()
    return upstream.caches


LIVE_APPS: list = []  # the proxies make_proxy is serving right now


@pytest.fixture(autouse=True)
def _background_summaries_end_with_their_test():
    """A summary the proxy makes in the background may still be on its way when a test ends; the
    next test on the same (session-wide) proxy and fake upstream must not see its call."""
    yield
    deadline = time.monotonic() + 20
    for app in list(LIVE_APPS):
        services = getattr(app.state, "services", None)
        while services is not None and time.monotonic() < deadline:
            state = services.summaries.state()
            if not state.running and not state.queued:
                break
            time.sleep(0.01)


@pytest.fixture
def fresh_summary_memory(monkeypatch):
    """Each test's proxy has a store of its own, but all run in this one process: what a process
    remembers of the summaries it saw (by tenant and prefix) must not carry over from a test to
    the next, as it never carries over from one deployment's store to another's. Modules whose
    tests count summaries use it: `pytestmark = pytest.mark.usefixtures("fresh_summary_memory")`."""
    from proxy.core import compression
    from proxy.offload import records as summary_memo
    from proxy.offload import summaries

    monkeypatch.setattr(summary_memo, "_records", {})
    monkeypatch.setattr(summaries, "_seen", compression.SeenPrefixes())


@pytest.fixture(scope="session")
def make_proxy(_fake_upstream_server, tmp_path_factory):
    """Start a proxy in front of the fake upstream: `with make_proxy(**settings) as url: ...`."""

    @contextmanager
    def start(**overrides) -> Iterator[str]:
        _, fake_server = _fake_upstream_server
        options = {
            "upstream": f"{fake_server.url}/v1",
            "anthropic_upstream": fake_server.url,
            "data_dir": tmp_path_factory.mktemp("store"),
            "store_timeout": 2.0,
        }  # a healthy store must meet it on a loaded machine (0.5 s: a cluster did not)
        options.update(overrides)
        app = create_app(ServerSettings(**options))
        with ServerThread(app) as server:
            LIVE_APPS.append(app)
            try:
                yield server.url
            finally:
                LIVE_APPS.remove(app)

    return start


@pytest.fixture
def key() -> str:
    """A tenant of the test's own (an OpenAI-style key) on the session's shared proxy, whose store
    the session's tests share; a module may give its own (Anthropic-style keys)."""
    return f"sk-{uuid.uuid4().hex}"


@pytest.fixture(scope="session")
def proxy_url(make_proxy) -> Iterator[str]:
    with make_proxy() as url:
        yield url


@pytest.fixture
def client(proxy_url, upstream) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{proxy_url}/v1", api_key="sk-test-key", max_retries=0, timeout=20)


@pytest.fixture
def aclient(proxy_url, upstream) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{proxy_url}/v1", api_key="sk-test-key", max_retries=0, timeout=20)


@pytest.fixture(scope="session")
def anyio_backend() -> str:  # the proxy runs on asyncio only: every async test, one backend
    return "asyncio"


def pytest_collection_modifyitems(session, config, items):
    """A test id holding an object's address differs between pytest-xdist workers, which then
    refuse to run: say which, at collection."""
    import re

    bad = [item.nodeid for item in items if re.search(r" at 0x[0-9a-f]+", item.nodeid)]
    if bad:
        raise pytest.UsageError(f"test ids with an object's address (give them ids=): {bad[:3]}")
    parallel.pytest_collection_modifyitems(session, config, items)
