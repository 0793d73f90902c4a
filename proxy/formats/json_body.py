"""JSON request bodies, checked where the proxy reads them: shared by every wire format's `body`.

A body must be a JSON object no deeper than MAX_DEPTH; a field the proxy reads with the wrong
type is a 400 `invalid_type` naming it (`param`), in the endpoint's error shape.

One mechanism for the three formats: a `Shape` says, per field name, which JSON types the code
reading that field relies on (`of`, `STRING`, a nested `Shape`, …), and `check_body` walks the
body along it in one pass. A field read anywhere (a format's modules, the core, the token
counter, the reload tools, the summary requests) is declared in a shape, or the code reading
it must take any JSON value. `item_fields` and `part_shape` are what the format-neutral core
reads of every format's history items and content parts (`proxy.core.tokens` above all).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Union

from proxy.core import jsonio
from proxy.core import jsonio as json_text
from proxy.core import jsonio as large_json
from proxy.core.jsonio import JsonObject, nested_deeper_than
from proxy.errors import Kind, ProxyError

MAX_DEPTH = 128  # well below orjson's serialisation limit (254 levels) and the stdlib's recursion limit
# bytes: a body above is parsed and checked off the event loop, in `proxy.offload.cpu_pool`'s pool
# (`proxy.http.managed.ManagedCall.open`, the offload API, the relays)
LARGE_BODY = 1024 * 1024

_TYPE_NAMES = {
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "a boolean",
    list: "an array",
    dict: "an object",
    type(None): "null",
}


def too_deep() -> ProxyError:
    return ProxyError(Kind.BAD_REQUEST, f"Request body nests JSON deeper than {MAX_DEPTH} levels.", code="invalid_json")


def invalid(param: str, expected: str, value: Any) -> ProxyError:
    got = _TYPE_NAMES.get(type(value), type(value).__name__)
    return ProxyError(
        Kind.BAD_REQUEST,
        f"Invalid type for '{param}': expected {expected}, but got {got} instead.",
        code="invalid_type",
        param=param,
    )


def nested(value: Any, level: int) -> None:
    """`value` sits `level` deep in the body (the body is level 1): refuse it if it nests too far."""
    if (type(value) is dict or type(value) is list) and nested_deeper_than(value, MAX_DEPTH - level + 1):
        raise too_deep()


Field = Callable[[Any, int], None]
"""Checks a field's value (set, not null) sitting `level` deep: raises WrongType if it has the
wrong type (ProxyError `too_deep` if it nests too deep)."""
Check = Union[Field, "Shape"]
"""What a field is read with: a `Field`, or a `Shape` (an object of that shape)."""


class WrongType(Exception):
    """A value of the wrong type; `path` (innermost key first) grows as it unwinds to the body."""

    def __init__(self, expected: str, value: Any) -> None:
        self.expected, self.value = expected, value
        self.path: list[str | int] = []

    def error(self) -> ProxyError:
        param = "".join(f"[{key}]" if type(key) is int else f".{key}" for key in reversed(self.path))
        return invalid(param.removeprefix("."), self.expected, self.value)


class Shape:
    """What the proxy reads of a JSON object: a `Field` check per field name (any other field is
    only depth-checked), and more fields read of the objects of a given `type` (`variant`)."""

    __slots__ = ("fields", "strict", "by_type")

    def __init__(self, fields: Mapping[str, Check] | None = None) -> None:
        self.fields: dict[str, Check] = dict(fields or {})
        self.strict = _strict(self.fields)
        self.by_type: dict[str, tuple[dict[str, Check], frozenset[str]]] = {}

    def variant(self, kind: str, **fields: Check) -> Shape:
        """Objects whose `type` is `kind` have `fields` read too."""
        merged = {**self.fields, **fields}
        self.by_type[kind] = (merged, _strict(merged))
        return self


def _strict(fields: dict[str, Check]) -> frozenset[str]:
    """The fields a string is wrong for (a string value of any other field needs no check)."""
    return frozenset(name for name, check in fields.items() if not getattr(check, "text", False))


def check_object(obj: JsonObject, shape: Shape, level: int) -> None:
    """`obj` (at `level`) has the fields of `shape` right. Inlined on purpose: it runs over every
    item of every request; the path of a wrong field is only built when there is one."""
    fields, strict = shape.fields, shape.strict
    if shape.by_type:
        kind = obj.get("type")
        if type(kind) is str:
            fields, strict = shape.by_type.get(kind, (fields, strict))
    level += 1  # the fields' level
    for name, value in obj.items():
        if type(value) is str:
            if name not in strict:
                continue
        elif value is None:
            continue
        check = fields.get(name)
        if check is None:
            if type(value) is dict or type(value) is list:
                nested(value, level)
            continue
        try:
            if isinstance(check, Shape):  # an object read with that shape
                if type(value) is not dict:
                    raise WrongType("an object", value)
                check_object(value, check, level)
            else:
                check(value, level)
        except WrongType as exc:
            exc.path.append(name)
            raise


def of(
    expected: str,
    *,
    text: bool = False,
    flag: bool = False,
    array: bool = False,
    scalar: bool = False,
    obj: Shape | None = None,
    objs: Shape | None = None,
) -> Field:
    """A `Field` accepting the JSON types named: a string (`text`), a boolean (`flag`), any array
    (`array`), a number or a boolean (`scalar`), an object read with the shape `obj`, an array of
    objects read with the shape `objs`."""

    def check(value: Any, level: int) -> None:
        kind = type(value)
        if kind is str:
            if text:
                return
        elif kind is list:
            if objs is not None:
                inner = level + 1
                for item in value:
                    try:
                        if type(item) is not dict:
                            raise WrongType("an object", item)
                        check_object(item, objs, inner)
                    except WrongType as exc:  # the first item equal to this one failed first: its index
                        exc.path.append(value.index(item))
                        raise
                return
            if array:
                nested(value, level)
                return
        elif kind is dict:
            if obj is not None:
                check_object(value, obj, level)
                return
        elif kind is bool:
            if flag or scalar:
                return
        elif scalar:
            return  # a number
        raise WrongType(expected, value)

    check.text = text  # type: ignore[attr-defined]
    return check


def _string(value: Any, level: int) -> None:
    raise WrongType("a string", value)  # check_object lets strings through before


_string.text = True  # type: ignore[attr-defined]
STRING: Field = _string
BOOLEAN = of("a boolean", flag=True)
ARRAY = of("an array", array=True)
ANY_OBJECT = Shape()  # an object whose fields are not read (depth-checked only)


def objects(shape: Shape) -> Field:
    return of("an array of objects", objs=shape)


def text_or_objects(shape: Shape) -> Field:
    return of("a string or an array of objects", text=True, objs=shape)


def an_object(shape: Shape = ANY_OBJECT) -> Shape:
    """An object read with `shape` (`check_object` takes a shape for a field)."""
    return shape


# ---------------------------------------------------------------- what the format-neutral core reads


def part_shape(**extra: Check) -> Shape:
    """A content part as `proxy.core.tokens` reads it, in every format (plus the format's `extra`
    fields): `type` and `text` strings; a `tool_result`'s `content` and a `document`'s
    `source.content` a string or a list of parts of this same shape."""
    shape = Shape({"type": STRING, "text": STRING, **extra})
    parts = text_or_objects(shape)
    return shape.variant("tool_result", content=parts).variant(
        "document", source=an_object(Shape({"type": STRING, "content": parts}))
    )


CALL = Shape(
    {
        "id": STRING,
        "type": STRING,
        "function": an_object(Shape({"name": STRING, "arguments": STRING})),
        "custom": an_object(Shape({"name": STRING, "input": STRING})),
    }
)
TOOL = Shape({"type": STRING, "name": STRING, "function": an_object(Shape({"name": STRING}))})


def item_fields(part: Shape) -> dict[str, Field]:
    """The fields `proxy.core.tokens` reads of any history item (a chat message, a Responses
    input item, an Anthropic message), its parts of the shape `part`: `type`, `role`, `name`,
    `arguments` strings; `content` a string or a list of parts; `tool_calls` a list of calls
    (`CALL`); a call's `input` and a result's `output` a string, a list of parts or an object
    (the output's `type` a string; a number is not read); a reasoning `summary` a list of parts."""
    return {
        "type": STRING,
        "role": STRING,
        "name": STRING,
        "arguments": STRING,
        "content": text_or_objects(part),
        "tool_calls": objects(CALL),
        "input": of("a string, an array of objects or an object", text=True, objs=part, obj=ANY_OBJECT),
        "output": of("a string, an array of objects or an object", text=True, scalar=True, objs=part, obj=part),
        "summary": objects(part),
    }


def check_body(body: JsonObject, shape: Shape) -> None:
    """The body's fields (level 1 is the body), or ProxyError 400 `invalid_type` naming the first
    wrong one."""
    try:
        check_object(body, shape, 1)
    except WrongType as exc:
        raise exc.error() from None


def load_object(raw: bytes) -> JsonObject:
    """The body as a JSON object, or ProxyError 400 `invalid_json`."""
    try:
        body = large_json.loads_yielding(raw) if len(raw) > LARGE_BODY else jsonio.loads(raw)
    except jsonio.TooDeep as exc:
        raise too_deep() from exc
    except (ValueError, UnicodeDecodeError) as exc:
        if (codec := json_text.encoding(raw)) not in json_text.UTF8:
            raise ProxyError(
                Kind.BAD_REQUEST,
                f"Request body is not valid JSON: it is {json_text.described(codec)}, and a JSON "
                "body must be UTF-8 (RFC 8259).",
                code="invalid_json",
            ) from exc
        raise ProxyError(Kind.BAD_REQUEST, f"Request body is not valid JSON: {exc}", code="invalid_json") from exc
    if not isinstance(body, dict):
        raise ProxyError(Kind.BAD_REQUEST, "Request body must be a JSON object.", code="invalid_json")
    return body


def parse_body(
    raw: bytes, check: Callable[[JsonObject], None], *, items: str, noun: str, limit: int | None
) -> JsonObject:
    """The body as a JSON object checked by `check` (its format's field shapes), or ProxyError
    400; more than `limit` entries in its list `items` is a 400 `too_many_messages` too."""
    body = load_object(raw)
    check(body)
    check_count(body, items=items, noun=noun, limit=limit)
    return body


def check_count(body: JsonObject, *, items: str, noun: str, limit: int | None) -> None:
    """More than `limit` entries in the body's list `items` is a 400 `too_many_messages`."""
    listed = body.get(items)
    if limit is not None and isinstance(listed, list) and len(listed) > limit:
        raise ProxyError(
            Kind.BAD_REQUEST,
            f"Too many {noun}: {len(listed)} > {limit} (the proxy's --max-messages).",
            code="too_many_messages",
            param=items,
        )
