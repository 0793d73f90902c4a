"""proxy.http.telemetry: a log record's arguments, message and traceback are clipped."""

from __future__ import annotations

import json
import logging

from proxy.http.telemetry import MAX_LOGGED_CHARS, MAX_MESSAGE_CHARS, ClippedRecord, JsonFormatter, clip, clip_value


def record(msg: object, args: object = (), exc_info: object = None) -> ClippedRecord:
    return ClippedRecord("proxy.test", logging.WARNING, __file__, 1, msg, args, exc_info)


def test_clip_keeps_short_text_and_says_how_long_a_long_one_was() -> None:
    assert clip("gpt-5") == "gpt-5"
    assert clip("x" * 1_000) == "x" * MAX_LOGGED_CHARS + "…[1000 chars]"
    assert clip_value(["a" * 1_000] * 20) == [clip("a" * 1_000)] * 8 + ["…[12 more]"]
    assert clip_value(12) == 12 and clip_value(None) is None


def test_string_bytes_and_error_arguments_are_clipped() -> None:
    huge = "M" * 1_000_000
    line = record("model %s, raw %r, failed: %s", (huge, b"B" * 1_000_000, ValueError(huge))).getMessage()
    assert len(line) < 3 * MAX_LOGGED_CHARS + 200 and "…[1000000 chars]" in line
    assert record("tenant %(name)s", ({"name": huge},)).getMessage() == f"tenant {clip(huge)}"
    assert record("count %d of %s", (3, "x")).getMessage() == "count 3 of x"


def test_a_whole_message_and_each_traceback_line_are_clipped() -> None:
    assert len(record({"k": "v" * 1_000_000}).getMessage()) < MAX_MESSAGE_CHARS + 50  # an object, no arguments
    try:
        raise ValueError("E" * 1_000_000)
    except ValueError as exc:
        caught = record("failed", exc_info=(type(exc), exc, exc.__traceback__))
    text = logging.Formatter().format(caught)
    assert "Traceback" in text and len(text) < MAX_MESSAGE_CHARS + 2_000
    line = json.loads(JsonFormatter().format(caught))
    assert line["exception"] == caught.exc_text and len(json.dumps(line)) < MAX_MESSAGE_CHARS + 2_000


def test_a_clipped_access_line_is_logged_as_a_message() -> None:
    clipped = ClippedRecord("proxy.access", logging.INFO, __file__, 1, '{"model": "' + "M" * 10_000 + '"}', (), None)
    line = json.loads(JsonFormatter().format(clipped))
    assert line["message"].endswith("chars]") and "event" not in line
