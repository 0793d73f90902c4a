"""`offload-proxy demo`: the proxy at work with no key and no network.

- `_run`: the fake upstream and a proxy started on free loopback ports, the bundled
  conversation replayed into it in each wire format, and the turn-by-turn table and totals printed;
- `fake_upstream`: the minimal upstream with no model behind it, a program of its own
  (`python -m proxy.demo.fake_upstream PORT`, the benchmarks' and the docs' recipes' too);
- `conversation`: writes the bundled `conversation.jsonl` (`python -m proxy.demo.conversation`).

The two programs keep public names: their `python -m` command lines are documented. This surface
is what the command line (`proxy.cli`) uses.
"""

from proxy.demo._run import add_arguments, run_demo

__all__ = ["add_arguments", "run_demo"]
