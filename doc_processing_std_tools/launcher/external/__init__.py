"""External MCP servers mounted by ``command:`` or ``url:``: supervision and relayed calls.

- ``supervisor``: one long-lived session per server, restarts, health pings.
- ``child`` (a stdlib-only shim) and ``child_pipe``: a command's process and its stdin/stdout.
- ``relay``: ``tools/call`` relayed on a server's session, skipping fastmcp's dispatch;
  ``targets``: the table of tools that may be relayed or called directly.
- ``fast_path``, ``relay_lines``: the stdio fast path (raw lines in and out).

May import ``config`` and the launcher's leaves; never ``compose``, ``transports`` or ``cli``.
"""
