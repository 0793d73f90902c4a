"""Replay real traces turn by turn through the offload pipeline with a deterministic fake summariser.

    .venv/bin/python bench/replay_traces.py [TRACES.jsonl] [--ids PREFIX ...] [--mode auto]

Turn k is the request the agent sent before its k-th assistant message. Prints, per trace:
raw vs forwarded tokens (o200k_base, summed over turns), summariser calls, and the share of
turns whose forwarded messages begin with the previous turn's forwarded messages.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
if (SHARED / "tiktoken").is_dir():
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(SHARED / "tiktoken"))

import httpx  # noqa: E402

from proxy.compression import Compressor, SummaryContext  # noqa: E402
from proxy.config import ServerSettings  # noqa: E402
from proxy.offload_settings import OffloadSettings  # noqa: E402
from proxy.pipeline import prepare  # noqa: E402
from proxy.refs import RefStore  # noqa: E402
from proxy.store.sqlite import SQLiteStore  # noqa: E402
from proxy.summarizer import DEFAULT_PROMPT  # noqa: E402
from proxy.tenant import tenant_namespace  # noqa: E402
from proxy.tokens import counter_for_model  # noqa: E402
from proxy.upstream import Upstream  # noqa: E402


def fake_summarizer(calls: list[int]) -> httpx.MockTransport:
    """Answers every summarisation call with a fixed-size snapshot derived from its input."""

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        user = body["messages"][-1]["content"]
        calls.append(len(user))
        snapshot = ("<state_snapshot><task_overview>" + user[:1500].replace("<", "(") +
                    "</task_overview><next_steps>continue</next_steps></state_snapshot>")
        return httpx.Response(200, json={"choices": [{"message": {"role": "assistant", "content": snapshot}}],
                                         "usage": {"prompt_tokens": len(user) // 4, "completion_tokens": 400}})

    return httpx.MockTransport(handler)


def turns(messages: list[dict]) -> list[list[dict]]:
    return [messages[:k] for k, m in enumerate(messages) if m.get("role") == "assistant" and k > 0]


async def replay(trace: dict, settings: OffloadSettings, store: SQLiteStore) -> dict:
    counter = counter_for_model("gpt-4o")
    calls: list[int] = []
    upstream = Upstream(ServerSettings(upstream="http://fake/v1"), transport=fake_summarizer(calls))
    namespace = tenant_namespace("Bearer replay", trace["id"])
    refs = RefStore(store, namespace, 3600)
    ctx = SummaryContext(upstream, [], "fake", DEFAULT_PROMPT, 30, 5)
    raw_total = fwd_total = extends = 0
    previous: list | None = None
    n = 0
    for request in turns(trace["messages"]):
        prepared = await prepare(request, settings, counter, namespace, refs,
                                 Compressor(store, namespace, 3600, ctx))
        sent = prepared.plan.messages
        raw_total += sum(counter.text(json.dumps(m)) for m in request)
        fwd_total += sum(counter.text(json.dumps(m)) for m in sent)
        if previous is not None and sent[: len(previous)] == previous:
            extends += 1
        previous = sent
        n += 1
    await upstream.aclose()
    return {"id": trace["id"], "turns": n, "raw": raw_total, "forwarded": fwd_total, "summaries": len(calls),
            "extends": extends / max(n - 1, 1)}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("traces", nargs="?", default=str(SHARED / "traces" / "traces.jsonl"))
    parser.add_argument("--ids", nargs="*", default=["oh-0535", "msa-deepseek_lite", "msa-deepseek_chat_dev_rerun-pylint"])
    parser.add_argument("--mode", default="auto")
    args = parser.parse_args()
    traces = [json.loads(line) for line in open(args.traces)]
    chosen = [t for t in traces if any(t["id"].startswith(p) for p in args.ids)] if args.ids else traces
    store = SQLiteStore(Path(tempfile.mkdtemp(prefix="replay-")))
    settings = OffloadSettings(mode=args.mode)
    total_raw = total_fwd = 0
    for trace in chosen:
        r = await replay(trace, settings, store)
        total_raw += r["raw"]
        total_fwd += r["forwarded"]
        print(f"{r['id'][:44]:44} turns {r['turns']:4}  raw {r['raw']:>9}  forwarded {r['forwarded']:>9} "
              f"({r['forwarded'] / r['raw']:.2f})  summaries {r['summaries']:3}  extends-previous {r['extends']:.2f}")
    print(f"overall forwarded/raw {total_fwd / total_raw:.3f}")
    await store.close()


if __name__ == "__main__":
    asyncio.run(main())
