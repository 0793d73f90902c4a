"""The suite on several pytest-xdist workers (scripts/test starts them; `-n 0` runs it in one process).

Each worker is a process of its own: its session fixtures (Redis, the Redis Cluster, the fake
upstream, the shared proxy) are its own, on free ports, and so is what a process remembers
(metrics registries, module-level memos: `fresh_summary_memory`). A test file's tests run on one
worker, in order, as in a serial run (module fixtures, a module's own state), except the files
in `SPLIT`, whose tests are independent and long: each goes to the next free worker. Files run
longest first (`LONGEST`, measured), so that no long one starts last while the others idle.
"""

from __future__ import annotations

from xdist.scheduler import LoadScopeScheduling

# Test files whose tests are independent of each other and each long: one work unit per test.
SPLIT = frozenset(
    {
        "tests/e2e/test_type_fuzz.py",
    }
)

# The files that take longest (a serial run's durations, most first): started first.
LONGEST: tuple[str, ...] = ("tests/e2e/test_type_fuzz.py",)


def _file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


class FilesLongestFirst(LoadScopeScheduling):
    """pytest-xdist's scope scheduling with a test file for scope (a SPLIT file's test for its
    own), the work units in collection order (`pytest_collection_modifyitems`: LONGEST first)."""

    def __init__(self, config, log=None) -> None:
        super().__init__(config, log)
        config.option.loadscopereorder = False  # xdist would put the files with the most tests first

    def _split_scope(self, nodeid: str) -> str:
        file = _file(nodeid)
        return nodeid if file in SPLIT else file


def pytest_xdist_make_scheduler(config, log):
    return FilesLongestFirst(config, log)


def pytest_collection_modifyitems(session, config, items) -> None:
    """The LONGEST files first, the others after them in their own order (the same on every worker)."""
    rank = {file: i for i, file in enumerate(LONGEST)}
    items.sort(key=lambda item: rank.get(_file(item.nodeid), len(rank)))  # stable: a file keeps its order
