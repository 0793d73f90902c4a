"""JSON request bodies, checked where the proxy reads them: shared by every wire format's `body`.

A body must be a JSON object no deeper than MAX_DEPTH; a field the proxy reads with the wrong
shape is a 400 `invalid_type` naming it (`param`), in the OpenAI error shape.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from proxy.core import jsonio
from proxy.core.jsonio import nested_deeper_than
from proxy.errors import ProxyError

MAX_DEPTH = 128
LARGE_BODY = 1024 * 1024  # bytes: parsed and checked off the event loop (`proxy.offload.cpu.parse_request`)  # well below orjson's serialisation limit (254 levels) and the stdlib's recursion limit

_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "a boolean", list: "an array",
               dict: "an object", type(None): "null"}


def too_deep() -> ProxyError:
    return ProxyError(400, f"Request body nests JSON deeper than {MAX_DEPTH} levels.", code="invalid_json")


def invalid(param: str, expected: str, value: Any) -> ProxyError:
    got = _TYPE_NAMES.get(type(value), type(value).__name__)
    return ProxyError(400, f"Invalid type for '{param}': expected {expected}, but got {got} instead.",
                      code="invalid_type", param=param)


def nested(value: Any, level: int) -> None:
    """`value` sits `level` deep in the body (the body is level 1): refuse it if it nests too far."""
    if (type(value) is dict or type(value) is list) and nested_deeper_than(value, MAX_DEPTH - level + 1):
        raise too_deep()


def objects(value: Any, param: str) -> list[dict]:
    """`value` must be a list of objects."""
    if type(value) is not list:
        raise invalid(param, "an array of objects", value)
    for i, item in enumerate(value):
        if type(item) is not dict:
            raise invalid(f"{param}[{i}]", "an object", item)
    return value


def strings(obj: dict, names: tuple[str, ...], param: str, level: int) -> None:
    """Fields `names` of `obj` (at `level`) are strings when set; any other field is only depth-checked."""
    for name, value in obj.items():
        if value is None or type(value) is str:
            continue
        if name in names:
            raise invalid(f"{param}.{name}", "a string", value)
        nested(value, level + 1)


def load_object(raw: bytes) -> dict:
    """The body as a JSON object, or ProxyError 400 `invalid_json`."""
    try:
        body = jsonio.loads_yielding(raw) if len(raw) > LARGE_BODY else jsonio.loads(raw)
    except jsonio.TooDeep as exc:
        raise too_deep() from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProxyError(400, f"Request body is not valid JSON: {exc}", code="invalid_json") from exc
    if not isinstance(body, dict):
        raise ProxyError(400, "Request body must be a JSON object.", code="invalid_json")
    return body


def parse_body(raw: bytes, check: Callable[[dict], None], *, items: str, noun: str, limit: int | None) -> dict:
    """The body as a JSON object checked by `check` (its format's field shapes), or ProxyError
    400; more than `limit` entries in its list `items` is a 400 `too_many_messages` too."""
    body = load_object(raw)
    check(body)
    listed = body.get(items)
    if limit is not None and isinstance(listed, list) and len(listed) > limit:
        raise ProxyError(400, f"Too many {noun}: {len(listed)} > {limit}.", code="too_many_messages", param=items)
    return body
