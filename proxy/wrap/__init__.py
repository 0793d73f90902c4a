"""`offload-proxy wrap AGENT [proxy options] [-- AGENT ARGS]`: run a coding agent through the proxy.

- `agents`: the agents wrap knows (Claude Code, Codex CLI, opencode, aider), how each is found and
  how each is pointed at the proxy (environment variables, or `-c` overrides for Codex), never by
  rewriting a configuration file of the user's;
- `child`: the proxy as a child process on a free loopback port (or one already serving at
  `--proxy-url`), dying with the wrapper (Linux: the parent-death signal);
- `summary`: the one line printed when the agent exits, from the proxy's own statistics API;
- `command`: the subcommand itself: its options, the agent in the foreground with the terminal
  inherited (no pty in between), its exit status passed through.
"""
