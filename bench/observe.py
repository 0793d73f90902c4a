"""What observe mode costs: the proxy's CPU per turn observed against managed, and the latency it
adds to the forwarded request.

    .venv/bin/python bench/observe.py [--traces ../shared/traces/traces.jsonl] [--first 6] [--rounds 3]

Each round starts three proxies (embedded store, default settings) in front of the local fake
upstream, one per mode — `off` (the relay), `auto` (managed, the default) and `observe` — and sends
every turn of the first traces (chat completions, the whole history each turn, as agents send it)
through each, one mode after the other. Per mode: the proxy process's CPU per turn (all threads,
Linux schedstat, read after a pause so that background work a turn leaves behind counts as its
own) and the client's time to the last byte of each answer. Medians over rounds.

Then the plan alone, in this process, on the same turns: the managed turn (`proxy.turn.run_turn`
with the embedded store and the replay's built-in summariser, inline) against the observed one
(the session's store in memory, a summary's size estimated), CPU per turn (all threads).

Targets (issue 40): the observed plan's CPU per turn within 10 % of the managed turn's; observe's
time to the last byte no more than the relay's (the plan runs after the bytes are sent: with
`--gap-ms`, the pause an agent takes between two turns, it has run by the next one).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

import httpx2
from common import SHARED, cpu_seconds, machine, servers

from proxy.core import jsonio
from proxy.core.settings import OffloadSettings
from proxy.formats.chat import CHAT
from proxy.offload.records import TenantStore
from proxy.offload.summaries import Compressor
from proxy.offload.summarizer import DEFAULT_PROMPT, ESTIMATED_SUMMARY_TOKENS, SummaryContext
from proxy.replay._runner import load_conversations, turns_of, upstream_for
from proxy.store.memory import ObservedSessions
from proxy.store.sealing import Sealer
from proxy.store.sqlite import SQLiteStore
from proxy.turn import TurnInput, run_turn

MODES = ("off", "auto", "observe")
SETTLE = 0.5


def conversations(traces: Path, first: int) -> list[list[dict]]:
    """Each trace's turns as the bodies an agent sends."""
    out = []
    for conv in load_conversations(traces)[:first]:
        turns = []
        for request in turns_of(conv["messages"]):
            body = {"model": "gpt-4o", "messages": request}
            if conv.get("tools"):
                body["tools"] = conv["tools"]
            turns.append(body)
        out.append(turns)
    return out


async def plan_cpu(convs: list[list[dict]], *, observed: bool) -> float:
    """CPU seconds per turn of the turn's plan alone, in process."""
    upstream = upstream_for(None)
    sessions = ObservedSessions(256 * 1024**2)
    with tempfile.TemporaryDirectory(prefix="bench-observe-") as data:
        shared = SQLiteStore(Path(data))
        spent, turns = 0.0, 0
        try:
            for index, conv in enumerate(convs):
                store = sessions.store("bench", str(index)) if observed else shared
                tenant = TenantStore(store, f"bench-{index}", 3600, Sealer(None))

                def compressor(body, settings, refs, *, background, tenant=tenant):
                    ctx = SummaryContext(
                        upstream=upstream,
                        headers=[],
                        model="gpt-4o",
                        prompt=DEFAULT_PROMPT,
                        timeout=60.0,
                        wait=30.0,
                        view=CHAT.view,
                        wire=CHAT,
                        body=body,
                        request_model="gpt-4o",
                        refs=refs,
                        estimate=ESTIMATED_SUMMARY_TOKENS if observed else None,
                    )
                    return Compressor(tenant, ctx)

                for body in conv:
                    raw = jsonio.dumps(body)
                    start = time.process_time()
                    await run_turn(
                        TurnInput(CHAT, raw, body, CHAT.history(body), OffloadSettings(), tenant, compressor)
                    )
                    if observed:
                        sessions.measured("bench", str(index))
                    spent += time.process_time() - start
                    turns += 1
        finally:
            await upstream.aclose()
            await shared.close()
    return spent / max(turns, 1)


def one_mode(mode: str, turns: list[bytes], gap: float) -> tuple[float, float]:
    """(CPU seconds per turn, seconds to the last byte per turn) of one fresh proxy in `mode`."""
    headers = {"authorization": "Bearer sk-bench-observe", "content-type": "application/json", "X-Offload-Mode": mode}
    with servers() as (_, proxied, proc), httpx2.Client(timeout=120) as client:
        client.get(proxied.replace("/v1", "/healthz"))
        before, waited = cpu_seconds(proc.pid), 0.0
        for body in turns:
            start = time.perf_counter()
            r = client.post(f"{proxied}/chat/completions", content=body, headers=headers)
            waited += time.perf_counter() - start
            assert r.status_code == 200, r.text
            time.sleep(gap)
        time.sleep(SETTLE)  # what the last turns left running (an observed plan, a background summary)
        return (cpu_seconds(proc.pid) - before) / len(turns), waited / len(turns)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=Path, default=SHARED / "traces" / "traces.jsonl")
    parser.add_argument("--first", type=int, default=6, help="traces replayed (their every turn)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--gap-ms", type=float, default=20.0, help="pause between two turns (an agent's think time)")
    args = parser.parse_args()
    convs = conversations(args.traces, args.first)
    turns = [json.dumps(body).encode() for conv in convs for body in conv]
    print(f"{machine()}; {len(turns)} turns of the first {args.first} traces, chat completions, {args.rounds} rounds")
    cpu: dict[str, list[float]] = {m: [] for m in MODES}
    wall: dict[str, list[float]] = {m: [] for m in MODES}
    for _ in range(args.rounds):
        for mode in MODES:
            c, w = one_mode(mode, turns, args.gap_ms / 1e3)
            cpu[mode].append(c)
            wall[mode].append(w)
    med = {m: (statistics.median(cpu[m]) * 1e3, statistics.median(wall[m]) * 1e3) for m in MODES}
    for mode in MODES:
        print(f"  {mode:8} CPU {med[mode][0]:7.2f} ms/turn   to the last byte {med[mode][1]:7.2f} ms/turn")
    added = med["observe"][1] - med["off"][1]
    plans = {
        kind: statistics.median(asyncio.run(plan_cpu(convs, observed=kind == "observed")) for _ in range(args.rounds))
        * 1e3
        for kind in ("managed", "observed")
    }
    print(
        f"  the plan alone, in process: managed {plans['managed']:.2f} ms/turn, observed {plans['observed']:.2f} "
        f"ms/turn"
    )
    print(
        f"observed plan / managed turn, CPU: {plans['observed'] / plans['managed']:.3f} (target <= 1.10); whole "
        f"requests: observe {med['observe'][0] / med['auto'][0]:.3f} x managed (it relays the raw history where a "
        f"managed turn relays the reduced one); observe's time to the last byte minus the relay's: {added:+.2f} "
        f"ms/turn (target <= 0: the plan runs after the answer)"
    )


if __name__ == "__main__":
    main()
