"""The proxy's own work on one big request from a real trace, cold and then steady.

    .venv/bin/python bench/trace_request.py [TRACES.jsonl] [--id PREFIX]

Runs what the chat route runs before forwarding (parse, plan, store, serialise) in-process on
the embedded store, twice on the same body, and prints tokens before/after and CPU times.
Defaults to the largest conversation of ../shared/traces/traces.jsonl.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
if (SHARED / "tiktoken").is_dir():
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(SHARED / "tiktoken"))

from proxy.chat import dumps, parse_chat_body  # noqa: E402
from proxy.offload_settings import OffloadSettings  # noqa: E402
from proxy.plan import plan_compaction  # noqa: E402
from proxy.refs import RefStore  # noqa: E402
from proxy.store.sqlite import SQLiteStore  # noqa: E402
from proxy.tenant import tenant_namespace  # noqa: E402
from proxy.tokens import clear_cache, counter_for_model, load_encoder  # noqa: E402


def load_trace(path: Path, prefix: str | None) -> dict:
    traces = [json.loads(line) for line in path.open()]
    if prefix:
        return next(t for t in traces if t["id"].startswith(prefix))
    counter = counter_for_model("gpt-4o")
    return max(traces, key=lambda t: counter.messages(t["messages"]))


async def one_request(raw: bytes, store: SQLiteStore, settings: OffloadSettings) -> tuple[float, object]:
    start = time.process_time()
    body = parse_chat_body(raw)
    namespace = tenant_namespace("Bearer sk-bench", None)
    plan = plan_compaction(body["messages"], settings, counter_for_model(body.get("model")), namespace)
    await RefStore(store, namespace, 3600).save(plan.offloads, plan.refs)
    dumps({**body, "messages": plan.messages})
    return time.process_time() - start, plan


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("traces", nargs="?", default=str(SHARED / "traces" / "traces.jsonl"))
    parser.add_argument("--id", default=None)
    args = parser.parse_args()
    trace = load_trace(Path(args.traces), args.id)
    load_encoder("o200k_base")
    raw = json.dumps({"model": "gpt-4o", "messages": trace["messages"], "tools": trace.get("tools") or []}).encode()
    store = SQLiteStore(Path(tempfile.mkdtemp(prefix="bench-trace-")))
    settings = OffloadSettings(mode="compact")
    clear_cache()
    cold, plan = await one_request(raw, store, settings)
    steady, _ = await one_request(raw, store, settings)
    await store.close()
    print(f"trace {trace['id']} ({len(trace['messages'])} messages, {len(raw) / 1e6:.2f} MB)")
    print(f"tokens before {plan.tokens_before}, after compaction {plan.tokens_after} "
          f"({plan.tokens_after / plan.tokens_before:.2f}), {len(plan.offloads)} tool results offloaded")
    print(f"proxy CPU: first (cold) {cold * 1e3:.1f} ms, second (steady) {steady * 1e3:.1f} ms, "
          f"ratio {steady / cold:.3f}")


if __name__ == "__main__":
    asyncio.run(main())
