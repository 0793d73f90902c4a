"""Every benchmark, one after the other, on the local fake upstream:

    .venv/bin/python bench/run_all.py

pass-through overhead (passthrough.py), the same through the openai SDK with 50 requests in
flight (concurrency.py), the 150K-token history cold vs steady (big_history.py), long streamed
answers through the reload path vs relayed (reload_stream.py), 500 concurrent streams (scale.py),
compressed request bodies decoded (body_decoding.py), /healthz while bodies of tens of MB are
sent (large_bodies.py), /healthz while tool results alike but never foldable are planned
(fold_stall.py), 60-step computer-use sessions of real screenshots (computer_use.py), the
Responses WebSocket mode vs HTTP (websocket.py) and under attack (websocket_attacks.py), the
modules one managed turn runs code in (request_path.py). The savings on real traces come from
`python -m proxy replay ../shared/traces/traces.jsonl`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

if __name__ == "__main__":
    for script in (
        "passthrough.py",
        "concurrency.py",
        "big_history.py",
        "reload_stream.py",
        "scale.py",
        "body_decoding.py",
        "large_bodies.py",
        "fold_stall.py",
        "computer_use.py",
        "websocket.py",
        "websocket_attacks.py",
        "request_path.py",
    ):
        print(f"\n== {script}", flush=True)
        subprocess.run([sys.executable, str(HERE / script)], check=True, cwd=HERE.parent)
