import pytest

from proxy.http.canonical_path import canonical


@pytest.mark.parametrize(("path", "expected"), [
    ("/v1/messages", "/v1/messages"),
    ("/v1/messages/", "/v1/messages"),
    ("/v1//messages", "/v1/messages"),
    ("//v1///chat//completions//", "/v1/chat/completions"),
    ("/", "/"),
    ("//", "/"),
    ("", ""),
])
def test_one_spelling(path, expected):
    assert canonical(path) == expected
