"""The one exception map (`proxy.http.error_map`): every route's errors as a status and a body in
the shape of the client's API."""

from __future__ import annotations

import json

import pytest

from proxy.errors import Kind, ProxyError
from proxy.http.disconnect import ClientDisconnected
from proxy.http.error_map import answered, proxy_error
from proxy.offload.tenant import CredentialRejected, QuotaExceeded
from proxy.store import StoreUnavailable
from proxy.turn._context_management import CompactionFailed

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
    own = ProxyError(Kind.BAD_REQUEST, "bad", code="x", param="p")
    assert proxy_error(own, doing="Nothing stored") is own

    async def unknown():
        raise RuntimeError("not ours")

    with pytest.raises(RuntimeError):
        await answered(unknown)


def test_every_kind_has_a_status():
    """A kind added to proxy.errors.Kind without a row in the map fails here."""
    from proxy.http.error_map import STATUSES

    assert set(STATUSES) == set(Kind)
    assert all(400 <= row.status < 600 for row in STATUSES.values())
    # a server's fault is said as one: OpenAI's server_error for every 5xx, never for a 4xx
    assert all((row.type_ == "server_error") == (row.status >= 500) for row in STATUSES.values())


@pytest.mark.parametrize("kind", list(Kind))
@pytest.mark.parametrize("shape", ["openai", "anthropic"])
def test_each_kind_is_answered_with_its_status(kind, shape):
    from proxy.http.error_map import STATUSES, response_of, status_of

    error = ProxyError(kind, "Why.", code="c", param="p")
    response = response_of(error, shape)
    assert response.status_code == status_of(error) == STATUSES[kind].status
    body = json.loads(response.body)
    if shape == "openai":
        assert body == {"error": {"message": "Why.", "type": STATUSES[kind].type_, "param": "p", "code": "c"}}
    else:
        assert body["type"] == "error" and body["error"]["message"] == "Why."


def test_anthropic_types_by_status_are_anthropics():
    from proxy.errors import ANTHROPIC_ERROR_TYPES
    from proxy.http.error_map import ANTHROPIC_TYPES

    assert set(ANTHROPIC_TYPES.values()) | {"api_error"} == ANTHROPIC_ERROR_TYPES


async def test_a_failure_of_the_core_is_worded_by_its_kind():
    """A ProxyError whose text is a detail (a `Failure`, here the JSON reader's) is worded by the
    map as the builtin it also is (a ValueError) was: a 502 the proxy could not process."""
    from proxy.core.jsonio import TooDeep

    error = proxy_error(TooDeep("JSON nested too deeply"), doing="The compaction failed")
    assert (error.kind, error.code) == (Kind.UNPROCESSABLE, "proxy_error")
    assert error.message == "The compaction failed: the proxy could not process this exchange (TooDeep)."
