"""The demo's servers die with the demo, even when it is killed (Linux: PR_SET_PDEATHSIG)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from proxy.demo._run import die_with_parent

# A parent that starts a long sleeper as the demo starts its servers (a session of its own), prints
# its pid, then waits to be killed.
PARENT = """
import subprocess, sys, time
from proxy.demo._run import die_with_parent
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True,
                         preexec_fn=die_with_parent())
print(child.pid, flush=True)
time.sleep(60)
"""


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1][0] != "Z"  # a zombie (awaiting its reaper) is gone
    except FileNotFoundError:
        return False


def test_the_child_gets_sigterm_when_its_parent_is_killed():
    assert die_with_parent() is not None
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    try:
        assert alive(child)
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 10
        while alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(child)
    finally:
        if alive(child):
            os.kill(child, 9)
