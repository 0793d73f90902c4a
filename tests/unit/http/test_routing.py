import pytest

from proxy.http.routing import canonical


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/v1/messages", "/v1/messages"),
        ("/v1/messages/", "/v1/messages"),
        ("/v1//messages", "/v1/messages"),
        ("//v1///chat//completions//", "/v1/chat/completions"),
        ("/", "/"),
        ("//", "/"),
        ("", ""),
    ],
)
def test_one_spelling(path, expected):
    assert canonical(path) == expected


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/chat/completions", "/v1/chat/completions"),
        ("/responses/", "/v1/responses"),
        ("//messages//count_tokens", "/v1/messages/count_tokens"),
        ("/models/gpt-4o", "/v1/models/gpt-4o"),
        ("/v1/models", "/v1/models"),
        ("/healthz", "/healthz"),
        ("/readyz", "/readyz"),
        ("/metrics", "/metrics"),
        ("/dashboard/app.js", "/dashboard/app.js"),
        ("/chatter", "/chatter"),
        ("/v1", "/v1"),
    ],
)
def test_api_paths_without_v1_get_it(path, expected):
    assert canonical(path) == expected
