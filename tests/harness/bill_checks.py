"""The proxy's bill read back and held against the fake upstream's (`tests.harness.billing`).

The statistics API (`GET /v1/offload/stats`, `/v1/offload/sessions/{id}`: what the dashboard
draws) is read with the tenant's own credential, polled until the recorder has flushed what the
test waits for (about once a second). `assert_billed` compares one bill as the API shows it
(`tokens` and `usd` per part) with the sum of the fake's bills, priced at the built-in table:
the money is compared to the micro-dollar the API rounds to.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx2
import pytest

from proxy.stats._prices import PriceTable
from tests.harness import billing
from tests.harness.servers import is_summary_call

PRICES = PriceTable()
WAIT = 20.0  # seconds a flush may take to show (a hang guard, not a speed target)


def call_of(bill: billing.Bill) -> str:
    """What the proxy calls the request billed: "summary" (its summary calls), "keepalive" (a
    cache ping: the least output the API accepts, `proxy.formats.prompt_cache`), else "turn"
    (a client's answer or one of its reload rounds)."""
    if is_summary_call(bill.rec):
        return "summary"
    body = bill.rec.json_object() or {}
    if (
        body.get("max_tokens") == 1
        or body.get("max_completion_tokens") == 1
        or (body.get("max_output_tokens") == 16 and body.get("store") is False)
    ):
        return "keepalive"
    return "turn"


def of_call(bills: list[billing.Bill], call: str) -> list[billing.Bill]:
    return [b for b in bills if call_of(b) == call]


def _get(url: str, path: str, key: str, **params: str) -> dict[str, Any]:
    r = httpx2.get(f"{url}{path}", params=params, headers={"authorization": f"Bearer {key}"}, timeout=10)
    assert r.status_code in (200, 404), r.text
    return r.json()


def _polled(read: Callable[[], dict], done: Callable[[dict], bool]) -> dict:
    """`read()` once `done` holds of it, else the last one read (for the assertions to say why)."""
    deadline = time.monotonic() + WAIT
    while not done(got := read()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return got


def totals(url: str, key: str, done: Callable[[dict], bool]) -> dict:
    """The tenant's `totals` over the last hour, once `done(totals)`."""
    return _polled(lambda: _get(url, "/v1/offload/stats", key, window="1h")["totals"], done)


def session(url: str, key: str, name: str, done: Callable[[dict], bool]) -> dict:
    """One session's totals and turns (`/v1/offload/sessions/{name}`), once `done(session)`."""
    return _polled(lambda: _get(url, f"/v1/offload/sessions/{name}", key), lambda s: "bill" in s and done(s))


def answers(n: int) -> Callable[[dict], bool]:
    """Done once the bill counts `n` upstream answers (turns, rounds, summaries, pings)."""
    return lambda shown: shown["bill"]["answers"] + shown["bill"]["answers_without_usage"] >= n


def usd(tokens: dict[str, int], model: str) -> dict[str, float]:
    price = PRICES.price(model)
    return {part: n * price.of(part) / 1e6 for part, n in tokens.items()}


def assert_billed(shown: dict, bills: list[billing.Bill], model: str) -> None:
    """`shown` (a bill of the statistics: `tokens`, `usd`) is what the fake billed for `bills`,
    in tokens per part and in money at `model`'s price."""
    expected = billing.tokens(bills)
    assert {part: shown["tokens"][part] for part in expected} == expected
    money = usd(expected, model)
    assert {part: shown["usd"][part] for part in money} == pytest.approx(money, abs=1.5e-6)
    assert shown["usd"]["total"] == pytest.approx(sum(money.values()), abs=5e-6)


def assert_turn_billed(row: dict, bills: list[billing.Bill], *, summaries: list[billing.Bill] = ()) -> None:
    """A session's turn row: its `bill` is `bills` (its answer and reload rounds), its
    `summary_bill` the summary calls it waited for; every answer reported usage."""
    for field, expected in (("bill", bills), ("summary_bill", summaries)):
        got = row[field]
        assert {part: got[part] for part in billing.tokens([])} == billing.tokens(list(expected)), field
        assert (got["answers"], got["unreported"]) == (len(expected), 0), field


def assert_shown(url: str, key: str, session_name: str, bills: list[billing.Bill], *, model: str, turns: int) -> dict:
    """The tenant's bill (all of it, and per call) and the session's are `bills`, every answer
    with its usage; the session as the API shows it (its turns' rows in `data`)."""
    shown = totals(url, key, answers(len(bills)))
    assert shown["requests"] == turns
    bill = shown["bill"]
    assert_billed(bill, bills, model)
    for call in ("turn", "summary", "keepalive"):
        assert_billed(bill["calls"][call], of_call(bills, call), model)
        assert bill["calls"][call]["answers"] == len(of_call(bills, call)), call
    assert (bill["answers_without_usage"], bill["turns_without_usage"]) == (0, 0)
    assert shown["cost_billed_usd"] == bill["usd"]["total"]
    found = session(url, key, session_name, answers(len(bills)))
    assert_billed(found["bill"], bills, model)
    assert found["turns"] == turns
    return found


def wait_for_event(url: str, key: str, session_name: str, kind: str) -> dict:
    """The session's last event of `kind` (`GET /v1/offload/events`), once there is one."""

    def found() -> list[dict]:
        events = _get(url, "/v1/offload/events", key, session=session_name)["data"]
        return [e for e in events if e["type"] == kind]

    got = _polled(lambda: {"events": found()}, lambda r: bool(r["events"]))["events"]
    assert got, f"no {kind} event"
    return got[-1]
