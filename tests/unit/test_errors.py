"""The proxy's own errors in each API's shape."""

from __future__ import annotations

import json

from proxy.errors import Kind, ProxyError, anthropic_error_event, error_body
from proxy.http.error_map import error_response, response_of


def test_openai_shape():
    response = response_of(ProxyError(Kind.BAD_REQUEST, "Bad.", code="invalid_body", param="messages"))
    assert json.loads(response.body) == {
        "error": {"message": "Bad.", "type": "invalid_request_error", "param": "messages", "code": "invalid_body"}
    }


def test_anthropic_shape_and_types_by_status():
    for status, kind in (
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
        (413, "request_too_large"),
        (429, "rate_limit_error"),
        (502, "api_error"),
        (504, "timeout_error"),
        (529, "overloaded_error"),
    ):
        response = error_response(status, "Why.", shape="anthropic")
        assert response.status_code == status
        assert json.loads(response.body) == {"type": "error", "error": {"type": kind, "message": "Why."}}


def test_anthropic_stream_error_event():
    event = anthropic_error_event(error_body("The upstream broke off.", "server_error", "stream_error"))
    assert event == {"type": "error", "error": {"type": "api_error", "message": "The upstream broke off."}}
    assert anthropic_error_event({})["error"]["message"] == "The request failed."


def test_the_root_imports_nothing_but_the_standard_library():
    """Every layer's exceptions derive from `proxy.errors`: it must load no web framework (nor
    anything of the proxy's)."""
    import sys
    from pathlib import Path

    import proxy.errors
    from tests.unit.core.test_purity import imported_modules

    imported = imported_modules(Path(proxy.errors.__file__))
    assert {m for m in imported if m.split(".")[0] not in sys.stdlib_module_names} == set()


def test_every_exception_of_the_proxy_derives_from_the_root():
    """One hierarchy: a class of the proxy's named like an error derives from ProxyError, but
    for those that end a command or a worker rather than answer a client (listed)."""
    import importlib
    import inspect
    import pkgutil

    import proxy

    apart = {
        "proxy.wrap._proxy.WrapError",  # the `wrap` command's own exit
        "proxy.wrap._command.Interrupted",  # a BaseException: the wrapped command was interrupted
        "proxy.replay._target.TargetError",  # the replay command's: its target cannot be reached
        "proxy.replay._live.LiveError",
        "proxy.replay._live.AnswerTooLarge",
        "proxy.replay._live_report.AnswerError",
        "proxy.demo._run.DemoError",
        "proxy.http.disconnect.ClientDisconnected",  # the HTTP layer's own (proxy.http.error_map)
        "proxy.http.body.BodyRefused",
        "proxy.http.body.TooLarge",
        "proxy.http.body.Corrupt",
        "proxy.formats.json_body.WrongType",  # unwinds to `json_body.invalid`, a ProxyError
        "proxy.offload.summarizer.SummaryFailed",  # raised inside the summariser's `except ProxyError`
        "proxy.offload.canary.CanaryMismatch",  # the `serve` command's refusal to start
        "proxy.reload.search.WorkerGone",  # a worker process died: the pool restarts it
    }
    found: dict[str, type] = {}
    for info in pkgutil.walk_packages(proxy.__path__, "proxy."):
        if info.name == "proxy.__main__":
            continue
        module = importlib.import_module(info.name)
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == info.name and issubclass(cls, BaseException):
                found[f"{info.name}.{name}"] = cls
    assert apart <= found.keys(), apart - found.keys()  # a class listed here that moved or went
    outside = tuple(found[name] for name in apart)
    assert [name for name, cls in found.items() if not issubclass(cls, (ProxyError, *outside))] == []
