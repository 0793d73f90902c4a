"""The JSON log formatter writes non-ASCII text as UTF-8, one record per line whatever the text."""

from __future__ import annotations

import json
import logging

from proxy.http.telemetry import JsonFormatter


def record(message: str) -> logging.LogRecord:
    return logging.LogRecord("proxy.startup", logging.INFO, __file__, 1, message, None, None)


def test_non_ascii_text_is_kept_not_escaped():
    line = JsonFormatter().format(record("openai      https://api.example.com/v1/…  (café)"))
    assert "…" in line and "café" in line and "\\u" not in line
    assert json.loads(line)["message"].endswith("/v1/…  (café)")


def test_line_separators_stay_escaped_so_a_record_is_one_line():
    line = JsonFormatter().format(record("a\u2028b\u2029c\nd"))
    assert len(line.splitlines()) == 1
    assert json.loads(line)["message"] == "a\u2028b\u2029c\nd"
