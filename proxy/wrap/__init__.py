"""`offload-proxy wrap AGENT [proxy options] [-- AGENT ARGS]`: run a coding agent through the proxy.

- `_agents`: the agents wrap knows (Claude Code, Codex CLI, opencode, aider), how each is found and
  how each is pointed at the proxy (environment variables, or `-c` overrides for Codex), never by
  rewriting a configuration file of the user's;
- `_proxy`: the proxy as a child process on a free loopback port (or one already serving at
  `--proxy-url`), dying with the wrapper (Linux: the parent-death signal), and the one line
  printed when the agent exits, from the proxy's own statistics API;
- `_command`: the subcommand itself: its options, the agent in the foreground with the terminal
  inherited (no pty in between), its exit status passed through.

This surface is what the command line (`proxy.cli`) uses.
"""

from proxy.wrap._command import add_arguments, run_wrap, split_agent_args, unknown_arguments

__all__ = ["add_arguments", "run_wrap", "split_agent_args", "unknown_arguments"]
