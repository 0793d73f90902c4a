"""The startup banner's offload line (`proxy.cli.banner_lines`) for the modes and a holdout."""

from __future__ import annotations

import pytest

from proxy.cli import banner_lines
from proxy.config import ServerSettings


def offload_line(**settings) -> str:
    [line] = [line for line in banner_lines(ServerSettings(**settings)) if line.startswith("  offload ")]
    return line


def test_a_holdout_in_force_is_said():
    assert "holdout: 10% of sessions forwarded unchanged as a control" in offload_line(holdout=0.1)
    assert "holdout" not in offload_line()


@pytest.mark.parametrize("mode", ["off", "observe"])
def test_a_holdout_is_not_said_where_nothing_is_managed(mode):
    line = offload_line(holdout=0.1, mode=mode)
    assert f"mode {mode}" in line and "holdout" not in line
