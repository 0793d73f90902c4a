"""The benchmarks' fake upstream, now shipped in the package (`proxy.demo.fake_upstream`, so an
installed proxy has it): `python bench/fake_upstream.py PORT` runs it as before."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository's proxy package
from proxy.demo.fake_upstream import *  # noqa: E402,F401,F403
from proxy.demo.fake_upstream import main  # noqa: E402

if __name__ == "__main__":
    main()
