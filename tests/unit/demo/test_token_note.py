"""The demo's line when token counts are estimates names why the encoding was not found."""

from __future__ import annotations

from proxy.demo import _run as run


def estimating(monkeypatch) -> None:
    monkeypatch.setattr("proxy.core.tokens.counting_method", lambda counter: {"method": "estimate"})


def test_no_line_when_the_encoding_loads(monkeypatch):
    monkeypatch.setattr("proxy.core.tokens.counting_method", lambda counter: {"method": "tiktoken"})
    assert run.token_note() is None


def test_a_cache_dir_without_the_encoding_is_named(monkeypatch, tmp_path):
    estimating(monkeypatch)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    note = run.token_note()
    assert note is not None and f"not in TIKTOKEN_CACHE_DIR={tmp_path}" in note and "offline" not in note


def test_no_cache_dir_says_so(monkeypatch):
    estimating(monkeypatch)
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    monkeypatch.delenv("DATA_GYM_CACHE_DIR", raising=False)
    assert "offline and no TIKTOKEN_CACHE_DIR" in (run.token_note() or "")
