"""Computer-use sessions: screenshots offloaded by content hash, in all three formats.

    .venv/bin/python bench/computer_use.py [--steps 60] [--sessions 2] [--out /tmp/cu-bench]
        [--batches 1,2,4,5,6,8] [--formats chat,responses,anthropic] [--no-serve]

Generates sessions of a computer-use agent (a task, then per step a click / type / scroll call of
a `computer` tool, its short result, now and then a page's text, and a real 1280×800 PNG
screenshot that changes a little at each step, as chat browser agents send it: a user message
with an `image_url` data URL), writes them as a replay trace (`sessions.jsonl`), and replays it
with the default settings in the three formats (`replay --format chat|responses|anthropic`;
Responses gets `input_image` parts, Anthropic base64 `image` blocks), once per
`X-Offload-Image-Batch` value (`--batches`). Prints forwarded/raw, prefix reuse, the
cache-weighted cost over the raw history's at both pricings (`replay`'s cost_breakdown: cached
prefixes read at 10 %, other input at 1.0 × for OpenAI, 1.25 × for Anthropic's cache writes),
reload exact and the pipeline's CPU per turn with the base64 bytes it hashes per second, the
summaries made, and the whole replay's wall and CPU time (its CPU over its turns: both of its
passes, the reload of every ref and the charts), then the cheapest batch per format and pricing.
Then (unless --no-serve) sends the last turn of a session (60 screenshots, ~20 MB) to a real `serve` in the
three formats (Responses: `computer_call_output` screenshots; Anthropic: images inside
`tool_result`s) and prints /healthz p50 / p99 while it is processed (target p99 <= 100 ms); and
sends every turn of the sessions to a real `serve` (`replay --target`, summaries made in the
background, as deployed), one format after the other, with /healthz p50 / p99 meanwhile and the
proxy's CPU per turn.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, cpu_seconds, healthz_probe, machine, servers  # noqa: E402

sys.path.insert(0, str(ROOT))
from tests.harness.screens import data_url, screenshot  # noqa: E402

ACTIONS = ("left_click", "type", "scroll", "left_click", "key")
PAGE = "\n".join(
    f"Result {i}: Train {i:02d}:40 to Lyon, platform {i % 9}, 2nd class from {29 + i} EUR" for i in range(40)
)


def _action(step: int) -> dict:
    kind = ACTIONS[step % len(ACTIONS)]
    if kind == "type":
        return {"action": "type", "text": f"query {step}"}
    if kind == "scroll":
        return {"action": "scroll", "coordinate": [640, 400], "scroll_direction": "down", "scroll_amount": 3}
    if kind == "key":
        return {"action": "key", "text": "Return"}
    return {"action": "left_click", "coordinate": [(97 * step) % 1240, 120 + (53 * step) % 600]}


def session(index: int, steps: int) -> dict:
    """One computer-use session in chat messages."""
    shots = [data_url(screenshot(step + 1000 * index)) for step in range(steps)]
    messages: list[dict] = [
        {
            "role": "system",
            "content": "You operate a desktop through the computer tool. Each step returns a screenshot.",
        },
        {"role": "user", "content": "Book the cheapest train to Lyon tomorrow morning."},
    ]
    for step in range(steps):
        call_id = f"call_{index}_{step}"
        messages.append(
            {
                "role": "assistant",
                "content": f"Step {step}: next action.",
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "computer", "arguments": json.dumps(_action(step))},
                    }
                ],
            }
        )
        result = PAGE if step % 15 == 7 else "done"
        messages.append({"role": "tool", "tool_call_id": call_id, "content": result})
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": f"Screenshot after step {step}."},
                    {"type": "image_url", "image_url": {"url": shots[step]}},
                ],
            }
        )
    return {
        "id": f"computer-use-{index}",
        "messages": messages,
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "computer",
                    "description": "Use the computer.",
                    "parameters": {"type": "object", "properties": {"action": {"type": "string"}}},
                },
            }
        ],
    }


PRICINGS = ("openai", "anthropic")


def replay(trace: Path, fmt: str, out: Path, batch: int) -> tuple[dict, float, float]:
    """The replay's report, its wall time and its process's CPU time (s): the whole command, its
    second (steady) pass over the turns, the reload of every ref and the charts included."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    where = out / f"{fmt}-batch{batch}"
    before, start = _children_cpu(), time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "proxy",
            "replay",
            str(trace),
            "--format",
            fmt,
            "--out",
            str(where),
            "--image-batch",
            str(batch),
        ],
        check=True,
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    wall, cpu = time.perf_counter() - start, _children_cpu() - before
    return json.loads((where / "report.json").read_text()), wall, cpu


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def cache_costs(overall: dict) -> dict[str, float]:
    """The cache-weighted cost over the raw history's, per pricing (`replay`'s cost_breakdown)."""
    return {name: overall["cost_breakdown"][name]["cache_cost_ratio"] for name in PRICINGS}


def cheapest(costs: dict[tuple[str, int], dict[str, float]]) -> list[str]:
    """Per format and pricing, the batch with the lowest cache-weighted cost; and over all of them
    (the mean of every format's and pricing's cost)."""
    lines = []
    formats = sorted({fmt for fmt, _ in costs})
    batches = sorted({batch for _, batch in costs})
    for fmt in formats:
        for name in PRICINGS:
            best = min(batches, key=lambda b: (costs[fmt, b][name], b))
            lines.append(f"cheapest {fmt:<10} {name:<10} batch {best:>3}: {costs[fmt, best][name]:.3f}")
    mean = {b: statistics.mean(costs[f, b][n] for f in formats for n in PRICINGS) for b in batches}
    best = min(batches, key=lambda b: (mean[b], b))
    lines.append(
        f"cheapest over formats and pricings: batch {best} (mean {mean[best]:.3f}; "
        + ", ".join(f"{b}: {mean[b]:.3f}" for b in batches)
        + ")"
    )
    return lines


def last_turn_bodies(conversation: dict) -> list[tuple[str, str, bytes]]:
    """The session's last request in the three formats, screenshots where each API has them."""
    messages = conversation["messages"]
    chat = {"model": "gpt-4o", "messages": messages}
    items: list[dict] = [{"role": "user", "content": messages[1]["content"]}]
    blocks: list[dict] = [{"role": "user", "content": messages[1]["content"]}]
    for i in range(2, len(messages), 3):
        call = messages[i]["tool_calls"][0]
        shot = messages[i + 2]["content"][1]["image_url"]["url"]
        items += [
            {
                "type": "computer_call",
                "id": f"cu_{i}",
                "call_id": call["id"],
                "status": "completed",
                "action": {"type": "click", "button": "left", "x": 1, "y": 2},
                "pending_safety_checks": [],
            },
            {
                "type": "computer_call_output",
                "call_id": call["id"],
                "output": {"type": "computer_screenshot", "image_url": shot},
            },
        ]
        blocks += [
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": f"toolu_{i}",
                        "name": "computer",
                        "input": json.loads(call["function"]["arguments"]),
                    }
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": f"toolu_{i}",
                        "content": [
                            {
                                "type": "image",
                                "source": {"type": "base64", "media_type": "image/png", "data": shot.partition(",")[2]},
                            }
                        ],
                    }
                ],
            },
        ]
    blocks.append({"role": "assistant", "content": "Checking."})
    blocks.append({"role": "user", "content": "Go on."})
    return [
        ("chat", "/chat/completions", orjson.dumps(chat)),
        (
            "responses",
            "/responses",
            orjson.dumps({"model": "computer-use-preview", "input": items, "truncation": "auto"}),
        ),
        ("anthropic", "/messages", orjson.dumps({"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": blocks})),
    ]


def ref_cost(shot: str, rounds: int = 50) -> None:
    """What a screenshot's ref costs: hashed (a new screenshot, or a cache miss) and remembered
    (`proxy.core.media`: the same bytes again, compared whole)."""
    from proxy.core.media import RefCache
    from proxy.core.texts import make_ref

    start = time.perf_counter()
    for _ in range(rounds):
        make_ref("bench", "image", shot)
    hashed = (time.perf_counter() - start) / rounds
    cache = RefCache()
    cache.ref("bench", "image", shot)
    copies = [(shot + " ")[:-1] for _ in range(rounds)]  # equal, other objects: as each request parses them
    start = time.perf_counter()
    for copy in copies:
        cache.ref("bench", "image", copy)
    remembered = (time.perf_counter() - start) / rounds
    print(
        f"ref of one screenshot ({len(shot) / 1e3:.0f} KB): hashed {hashed * 1e3:.2f} ms "
        f"({len(shot) / hashed / 1e6:.0f} MB/s blake2b), remembered {remembered * 1e6:.0f} us "
        f"({len(shot) / remembered / 1e6:.0f} MB/s compared)"
    )


def healthz_while(bodies: list[tuple[str, str, bytes]], rounds: int) -> None:
    with servers() as (_, proxy, _process):
        headers = {
            "authorization": "Bearer sk-bench-0000",
            "anthropic-version": "2023-06-01",
            "content-type": "application/json",
        }
        with httpx2.Client(timeout=600) as client, healthz_probe(proxy.removesuffix("/v1")):
            for turn in range(rounds):
                for name, path, raw in bodies:
                    t = time.perf_counter()
                    r = client.post(f"{proxy}{path}", content=raw, headers=headers)
                    print(
                        f"  {name} turn {turn + 1}: {len(raw) / 1e6:.1f} MB -> {r.status_code} in "
                        f"{time.perf_counter() - t:.2f} s, tokens {r.headers.get('x-offload-tokens-before')} -> "
                        f"{r.headers.get('x-offload-tokens-after')}, refs {r.headers.get('x-offload-refs')} "
                        f"({r.headers.get('x-offload-refs-created')} new)",
                        flush=True,
                    )


def served(trace: Path, formats: list[str], out: Path) -> None:
    """Every turn of the sessions sent to a real `serve` (`replay --target`), one format after the
    other: the older screenshots offloaded, the summaries made in the background as a deployment
    makes them (the fake upstream answers their calls), while /healthz is probed."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with servers() as (_, proxy, process):
        for fmt in formats:
            where = out / f"{fmt}-served"
            cpu, start, made = cpu_seconds(process.pid), time.perf_counter(), summaries_made(proxy)
            with healthz_probe(proxy.removesuffix("/v1"), label=f"  /healthz while the sessions are served ({fmt})"):
                subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "proxy",
                        "replay",
                        str(trace),
                        "--format",
                        fmt,
                        "--target",
                        proxy,
                        "--api-key",
                        "sk-bench-0000",
                        "--out",
                        str(where),
                    ],
                    check=True,
                    cwd=ROOT,
                    env=env,
                    stdout=subprocess.DEVNULL,
                )
            o = json.loads((where / "report.json").read_text())["overall"]
            turns = max(o["turns"], 1)
            print(
                f"  {fmt}: {o['turns']} turns served in {time.perf_counter() - start:.1f} s, proxy CPU "
                f"{(cpu_seconds(process.pid) - cpu) * 1e3 / turns:.0f} ms per turn, {o['errors']} errors, "
                f"{summaries_made(proxy) - made:.0f} summaries made, actions "
                + ", ".join(f"{action} {n}" for action, n in sorted(o["actions"].items())),
                flush=True,
            )


def summaries_made(proxy: str) -> float:
    """The summarisation calls the proxy made and stored so far, in the background too (/metrics)."""
    text = httpx2.get(proxy.removesuffix("/v1") + "/metrics", timeout=30).text
    return sum(
        float(line.rpartition(" ")[2])
        for line in text.splitlines()
        if line.startswith('offload_summaries_total{outcome="ok"}')
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--sessions", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("/tmp/computer-use-bench"))
    parser.add_argument("--rounds", type=int, default=2, help="times the last turns are sent to the server")
    parser.add_argument(
        "--batches",
        default="1,2,4,5,6,8",
        help='X-Offload-Image-Batch values to replay with ("": no replay, only the real serve)',
    )
    parser.add_argument("--formats", default="chat,responses,anthropic", help="wire formats to replay in")
    parser.add_argument("--no-serve", action="store_true", help="only the replays: no ref timing, no real serve")
    args = parser.parse_args()
    print(machine())
    args.out.mkdir(parents=True, exist_ok=True)
    trace = args.out / "sessions.jsonl"
    conversations = [session(i, args.steps) for i in range(args.sessions)]
    trace.write_text("".join(json.dumps(c) + "\n" for c in conversations))
    shot_chars = [
        len(m["content"][1]["image_url"]["url"])
        for m in conversations[0]["messages"]
        if m["role"] == "user" and isinstance(m["content"], list)
    ]
    print(
        f"{args.sessions} sessions x {args.steps} steps, screenshots 1280x800 PNG, "
        f"{statistics.mean(shot_chars) / 1e3:.0f} KB of base64 each; trace {trace.stat().st_size / 1e6:.1f} MB"
    )
    print(
        f"{'format':<10} {'batch':>5} {'forwarded/raw':>13} {'prefix reuse':>12} {'cache openai':>12} "
        f"{'cache anthr.':>12} {'reload exact':>12} {'refs':>5} {'ms/turn cold':>12} {'ms/turn steady':>14} "
        f"{'MB/s carried':>12} {'summaries':>9} {'wall s':>7} {'CPU s':>6} {'CPU ms/turn':>11}",
        flush=True,
    )
    costs: dict[tuple[str, int], dict[str, float]] = {}
    formats = [f for f in args.formats.split(",") if f]
    for fmt, batch in [(f, int(b)) for b in args.batches.split(",") if b for f in formats]:
        report, wall, cpu = replay(trace, fmt, args.out, batch)
        o = report["overall"]
        costs[fmt, batch] = cache_costs(o)
        ratio = o["forwarded_tokens"] / o["raw_tokens"]
        # the base64 of the screenshots a turn carries (the mean turn: half the session's), each one
        # read for its header and, once offloaded, mapped to its ref (hashed once, then remembered)
        per_turn = statistics.mean(shot_chars) * (args.steps + 1) / 2
        cold, steady = o.get("ms_per_turn_cold") or 0, o.get("ms_per_turn_steady") or 0
        print(
            f"{fmt:<10} {batch:>5} {ratio:>13.3f} {o['prefix_reuse']:>12.3f} {costs[fmt, batch]['openai']:>12.3f} "
            f"{costs[fmt, batch]['anthropic']:>12.3f} {o['reload_exact_fraction']:>12.2f} "
            f"{o.get('refs', 0):>5} {cold:>12.1f} {steady:>14.1f} "
            f"{per_turn / 1e3 / max(steady, 1e-9):>12.0f} {o['summaries']:>9} {wall:>7.1f} {cpu:>6.1f} "
            f"{cpu * 1e3 / max(o['turns'], 1):>11.0f}",
            flush=True,
        )
    if costs:  # none with --batches ""
        print("\n".join(cheapest(costs)))
        print("targets: cache-weighted cost <= 0.65 of raw at the default batch, reload exact 1.00")
    if args.no_serve:
        return
    ref_cost(conversations[0]["messages"][4]["content"][1]["image_url"]["url"])
    healthz_while(last_turn_bodies(conversations[0]), args.rounds)
    served(trace, formats, args.out)


if __name__ == "__main__":
    main()
