"""The one exception map (`proxy.http.error_map`): every route's errors as a status and a body in
the shape of the client's API."""

from __future__ import annotations

import json

import pytest

from proxy.compact_now import CompactionFailed
from proxy.errors import ProxyError
from proxy.http.disconnect import ClientDisconnected
from proxy.http.error_map import answered, proxy_error
from proxy.offload.quota import CredentialRejected, QuotaExceeded
from proxy.store import StoreUnavailable

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    "exc,status,code",
    [
        (StoreUnavailable("down"), 503, "store_unavailable"),
        (QuotaExceeded(10, 10), 429, "storage_quota_exceeded"),
        (CredentialRejected(), 401, "invalid_api_key"),
        (CompactionFailed("no summary"), 502, "compaction_failed"),
        (ClientDisconnected(), 499, None),
        (UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad"), 502, "proxy_error"),
        (RecursionError(), 502, "proxy_error"),
        (KeyError("x"), 500, "proxy_error"),
    ],
)
@pytest.mark.parametrize("shape", ["openai", "anthropic"])
async def test_each_error_is_answered_in_the_clients_shape(exc, status, code, shape):
    async def run():
        raise exc

    response = await answered(run, shape=shape)
    body = json.loads(response.body)
    assert response.status_code == status
    if shape == "openai":
        assert body["error"]["code"] == code and body["error"]["message"][0].isupper()
    else:
        assert body["type"] == "error" and body["error"]["message"]


async def test_what_failed_is_said_first():
    error = proxy_error(StoreUnavailable("timeout"), doing="The compaction failed")
    assert error.message == "The compaction failed: the proxy's store is unavailable (timeout); try again."
    assert proxy_error(StoreUnavailable("timeout")).message == "The proxy's store is unavailable (timeout); try again."


async def test_a_proxy_error_goes_as_it_is_and_an_unknown_one_is_raised():
    own = ProxyError(400, "bad", code="x", param="p")
    assert proxy_error(own, doing="Nothing stored") is own

    async def unknown():
        raise RuntimeError("not ours")

    with pytest.raises(RuntimeError):
        await answered(unknown)
