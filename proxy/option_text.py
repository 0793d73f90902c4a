"""How a list- or map-like option is written on the command line or in an `OFFLOAD_*` variable:
JSON, or its parts separated by commas. Read by the settings (`proxy.config`) and by the
parsers of the options' own values (`proxy.stats.prices`)."""

from __future__ import annotations

import json
from typing import Any


def json_or_commas(text: str, *, opener: str, expected: str) -> Any:
    """A list-like option as given on the command line or in the environment: JSON when it starts
    with `opener` (`[` or `{`), else its comma-separated parts, stripped, empty ones left out.
    ValueError, starting with `expected`, for JSON that does not parse."""
    text = text.strip()
    if text.startswith(opener):
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{expected}; got {text!r}, which is not valid JSON ({exc.msg})") from None
    return [part.strip() for part in text.split(",") if part.strip()]
