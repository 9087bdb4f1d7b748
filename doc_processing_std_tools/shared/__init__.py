"""What the built-in servers and the launcher share, one job per module.

- ``server_module``: ``ServerModule`` (a server package's ``SPEC``, standalone server and
  ``main``), ``tool_annotations`` and ``tool_errors``.
- ``argument_errors``: readable errors for bad tool arguments (``refused``); ``checked_tools``
  puts them on a server's function tools (``check_arguments``).
- ``tool_call_logs``: a failed tool call logged as one plain line.
- ``client_text``: text that can always be sent to a client (``sendable``, ``quote``, ``bounded``).
- ``workspace``: the working-directory rule, the per-user folders, the client's MCP roots.
- ``diffs`` and ``globs``: unified diffs in bounded time; glob patterns matched in linear time.

Never imports the launcher.
"""
