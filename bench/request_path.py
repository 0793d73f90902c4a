"""How many of the proxy's modules one managed turn runs code in, and how often it crosses
between them: a reader follows the request path through every one.

    .venv/bin/python bench/request_path.py [--format chat|responses|messages|all] [--tokens 20000] [--traces FILE]

The proxy runs as a real process (`offload-proxy serve`, embedded store, the local fake
upstream) with a profiler installed in every thread; after a warm-up turn (imports, the first
store writes), one more turn of the same conversation plus a new tool result is profiled from
just before the request until its answer and the work it leaves behind are done. Printed: the
`proxy` modules whose functions ran, the distinct module-to-module calls (caller's module ->
callee's module) and the number of such crossings. Structure, not speed: the figures are the
same on a loaded machine.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx2
from big_history import ENDPOINTS, FORMATS, as_format, build
from common import ROOT, SHARED, free_port, wait_up

# Run inside the proxy process: count calls between proxy modules while SIGUSR1 has turned it on,
# write them to $REQUEST_PATH_OUT at SIGUSR2.
TRACER = r"""
import json, os, signal, sys, threading
from collections import Counter
edges, modules, on = Counter(), set(), [False]
def profile(frame, event, arg):
    if not on[0] or event != "call":
        return
    callee = frame.f_globals.get("__name__", "")
    if not callee.startswith("proxy"):
        return
    modules.add(callee)
    back = frame.f_back
    caller = back.f_globals.get("__name__", "") if back is not None else ""
    if caller.startswith("proxy") and caller != callee:
        edges[(caller, callee)] += 1
def start(*_):
    edges.clear(); modules.clear(); on[0] = True
def stop(*_):
    on[0] = False
    out = os.environ["REQUEST_PATH_OUT"]
    with open(out + ".part", "w") as f:
        json.dump({"modules": sorted(modules), "edges": [[a, b, n] for (a, b), n in edges.items()]}, f)
    os.replace(out + ".part", out)  # whole, or not there yet
signal.signal(signal.SIGUSR1, start)
signal.signal(signal.SIGUSR2, stop)
threading.setprofile(profile)
sys.setprofile(profile)
from proxy.cli import main
sys.argv = ["offload-proxy", *sys.argv[1:]]
main()
"""


def profiled_turn(name: str, chat: dict) -> dict:
    up_port, proxy_port = free_port(), free_port()
    out = Path(tempfile.mkdtemp(prefix="request-path-")) / "path.json"
    env = {**os.environ, "OFFLOAD_LOG_LEVEL": "warning", "REQUEST_PATH_OUT": str(out)}
    upstream = subprocess.Popen([sys.executable, "-m", "proxy.demo.fake_upstream", str(up_port)], cwd=ROOT)
    args = ["serve", "--port", str(proxy_port), "--upstream", f"http://127.0.0.1:{up_port}/v1"]
    args += ["--anthropic-upstream", f"http://127.0.0.1:{up_port}", "--data-dir", str(out.parent / "store")]
    proxy = subprocess.Popen([sys.executable, "-c", TRACER, *args], env=env, cwd=ROOT)
    headers = {"authorization": "Bearer sk-bench", "content-type": "application/json"}
    try:
        wait_up(f"http://127.0.0.1:{up_port}/")
        wait_up(f"http://127.0.0.1:{proxy_port}/healthz")
        url = f"http://127.0.0.1:{proxy_port}/v1/{ENDPOINTS[name]}"
        with httpx2.Client(timeout=300) as client:
            first = as_format(chat, name)
            assert client.post(url, content=json.dumps(first), headers=headers).status_code == 200
            time.sleep(1.0)  # the warm-up turn's background work (summaries, statistics) done
            grown = dict(chat, messages=[*chat["messages"], *_next_round(chat)])
            proxy.send_signal(signal.SIGUSR1)
            time.sleep(0.2)
            r = client.post(url, content=json.dumps(as_format(grown, name)), headers=headers)
            assert r.status_code == 200, r.text
            time.sleep(1.0)
            proxy.send_signal(signal.SIGUSR2)
            for _ in range(600):  # a loaded machine: the handler runs when the loop gets to it
                if out.exists() and out.stat().st_size:
                    break
                time.sleep(0.1)
        return json.loads(out.read_text())
    finally:
        for p in (proxy, upstream):
            p.terminate()
            p.wait(timeout=10)


def _next_round(chat: dict) -> list[dict]:
    """One more assistant tool call and its (large) result: a turn that offloads something new."""
    call = {"id": "call_bench_path", "type": "function", "function": {"name": "shell", "arguments": '{"cmd":"ls"}'}}
    listing = "\n".join(f"src/module_{i:04d}.py  {i * 37 % 9000} bytes" for i in range(1500))
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_bench_path", "content": listing},
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--format", choices=[*FORMATS, "all"], default="all")
    parser.add_argument("--tokens", type=int, default=20_000)
    parser.add_argument("--traces", type=Path, default=SHARED / "traces" / "traces.jsonl")
    args = parser.parse_args()
    chat = build(args.tokens, args.traces)
    for name in FORMATS if args.format == "all" else [args.format]:
        path = profiled_turn(name, chat)
        crossings = sum(n for _, _, n in path["edges"])
        print(
            f"{name}: {len(path['modules'])} proxy modules ran code, {len(path['edges'])} distinct "
            f"module-to-module calls, {crossings} crossings"
        )


if __name__ == "__main__":
    main()
