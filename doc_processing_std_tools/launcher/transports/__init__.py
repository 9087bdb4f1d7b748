"""How the composed server meets its clients: ``stdio`` (one JSON-RPC message per line, with
``line_writer`` for replies and ``wire_errors`` for lines it cannot serve) and ``http``
(streamable HTTP, with ``asgi``'s pieces, ``header_guard`` and ``auth``).

May import ``external`` (the stdio fast path), ``config`` and the launcher's leaves; never
``compose`` or ``cli``: a transport is handed the FastMCP root and what ``/ready`` reports.
"""
