"""Client text in log lines, clipped: a client chooses the model name, session ids, paths,
header values, tool names, …; any of them may be a megabyte, and a log line must not be.

One mechanism for every log record of the process (the proxy's, uvicorn's access and error
lines, whatever the format, json or text): `install()` makes each record clip its string
arguments to MAX_LOGGED_CHARS, its whole message to MAX_MESSAGE_CHARS and each line of its
traceback to MAX_MESSAGE_CHARS. The access line (`proxy.http.telemetry.log_request`) is built
from values clipped with `clip` / `clip_value`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

MAX_LOGGED_CHARS = 300  # characters of one client-chosen value kept in a log line
MAX_MESSAGE_CHARS = 4_000  # characters of one log message (and of one line of a traceback)
MAX_LOGGED_ITEMS = 8  # entries of a list kept in the access line (its warnings)

_FORMATTER = logging.Formatter()


def clip(text: str, limit: int = MAX_LOGGED_CHARS) -> str:
    """`text`, or its first `limit` characters and how long it was."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}…[{len(text)} chars]"


def clip_value(value: Any) -> Any:
    """A JSON value for a log line with its strings clipped and its lists shortened."""
    if isinstance(value, str):
        return clip(value)
    if isinstance(value, list):
        kept = [clip_value(v) for v in value[:MAX_LOGGED_ITEMS]]
        return kept + [f"…[{len(value) - MAX_LOGGED_ITEMS} more]"] if len(value) > MAX_LOGGED_ITEMS else kept
    return value


def _argument(value: Any) -> Any:
    if isinstance(value, str):
        return clip(value)
    if isinstance(value, (bytes, bytearray)) and len(value) > MAX_LOGGED_CHARS:
        return bytes(value[:MAX_LOGGED_CHARS]) + b"..."
    if isinstance(value, BaseException):
        return clip(str(value))  # an error's message may quote what the client sent
    return value


def _traceback(exc_info: Any) -> str:
    return "\n".join(clip(line, MAX_MESSAGE_CHARS) for line in _FORMATTER.formatException(exc_info).split("\n"))


class ClippedRecord(logging.LogRecord):
    """A LogRecord whose arguments, message and traceback are clipped."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if isinstance(self.args, tuple):
            self.args = tuple(_argument(a) for a in self.args)
        elif isinstance(self.args, Mapping):
            self.args = {k: _argument(v) for k, v in self.args.items()}
        if self.exc_info and self.exc_info[0] is not None:
            self.exc_text = _traceback(self.exc_info)  # formatters use it as it is

    def getMessage(self) -> str:
        return clip(super().getMessage(), MAX_MESSAGE_CHARS)


def install() -> None:
    """Every log record made from now on is a ClippedRecord (idempotent; keeps a custom factory's
    records as they are)."""
    if logging.getLogRecordFactory() is logging.LogRecord:
        logging.setLogRecordFactory(ClippedRecord)
