"""jsonio.loads_yielding: the parse of large bodies off the event loop gives exactly what
`loads` gives (values and errors), and a document of many containers goes through the
standard library with a hook per object (the interpreter can switch threads between them)."""
from __future__ import annotations

import pytest

from proxy.core import jsonio

DOCS = [
    b'{"a": [1, 2.5, -0, 1e300, "x", null, true, false, {"b": {}}], "c": ""}',
    b'{"big": 123456789012345678901234567890, "neg": -98765432109876543210}',
    b'{"s": "\\ud83d lone", "t": "\\u00e9\\n", "u": "\xc3\xa9"}',
    b'{"dup": 1, "dup": 2}',
    b'[[], {}, [[[]]], {"k": [{"k": [{}]}]}]',
    b' \n {"ws": 1} \n',
]
BAD = [b'{"n": NaN}', b'{"n": Infinity}', b'{"n": 1e400}', b'{"a": 1', b'{"s": "hi \xed\xa0\xbd"}', b'{"a": 1} x',
       b'{"s": "\xff"}']


@pytest.fixture(params=["orjson path", "stdlib path"])
def threshold(request, monkeypatch):
    if request.param == "stdlib path":
        monkeypatch.setattr(jsonio, "MANY_CONTAINERS", 0)
    return request.param


@pytest.mark.parametrize("raw", DOCS)
def test_same_values_as_loads(raw, threshold):
    assert jsonio.loads_yielding(raw) == jsonio.loads(raw)
    assert jsonio.dumps(jsonio.loads_yielding(raw)) == jsonio.dumps(jsonio.loads(raw))


@pytest.mark.parametrize("raw", BAD)
def test_refused_like_loads(raw, monkeypatch):
    monkeypatch.setattr(jsonio, "MANY_CONTAINERS", 0)
    with pytest.raises(ValueError):
        jsonio.loads_yielding(raw)


def test_too_deep_is_too_deep(monkeypatch):
    monkeypatch.setattr(jsonio, "MANY_CONTAINERS", 0)
    with pytest.raises(jsonio.TooDeep):
        jsonio.loads_yielding(b"[" * 100_000 + b"]" * 100_000)


def test_many_objects_take_the_hooked_parser(monkeypatch):
    seen = []
    monkeypatch.setattr(jsonio, "_keep", lambda obj: seen.append(1) or obj)
    raw = b'{"messages": [' + b",".join([b'{"role": "user", "content": [{"type": "text", "text": ""}]}'] * 30_000) + b"]}"
    body = jsonio.loads_yielding(raw)
    assert len(body["messages"]) == 30_000 and len(seen) == 60_001
    seen.clear()
    few = b'{"messages": [{"role": "tool", "content": "' + b"x" * 5_000_000 + b'"}]}'
    assert len(jsonio.loads_yielding(few)["messages"][0]["content"]) == 5_000_000 and not seen
