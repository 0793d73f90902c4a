"""Every benchmark, one after the other, on the local fake upstream:

    .venv/bin/python bench/run_all.py

pass-through overhead (passthrough.py), the same through the openai SDK with 50 requests in
flight (concurrency.py), the 150K-token history cold vs steady (big_history.py) and 500
concurrent streams (scale.py), compressed request bodies decoded (body_decoding.py). The savings on real traces come from
`python -m proxy replay ../shared/traces/traces.jsonl`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

if __name__ == "__main__":
    for script in ("passthrough.py", "concurrency.py", "big_history.py", "scale.py", "body_decoding.py"):
        print(f"\n== {script}", flush=True)
        subprocess.run([sys.executable, str(HERE / script)], check=True, cwd=HERE.parent)
