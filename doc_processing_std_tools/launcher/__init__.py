"""The ``dpt-launch`` launcher, in layers; a module imports only its own layer and those below it.

==============  ============================================================  ==================
folder          what it holds                                                 may import
==============  ============================================================  ==================
``cli/``        argv, the verbs (``tools``, ``call``, ``pin``, ``init``, ...),  everything below
                ``serve`` (a composition on a transport), ``connect``
``compose/``    building every server into one FastMCP root, names,           transports, external,
                profiles, the sessions registry, reload, pins                 calls, config
``transports/`` stdio and streamable HTTP: bytes and requests in and out      external, calls, config
``external/``   ``command:`` and ``url:`` servers: supervision, child          calls, config
                processes, relayed calls and the stdio fast path
``calls/``      the one call policy every path uses (lock, deadline,          config
                pins, rate limits, audit, telemetry, failures)
``config/``     the YAML file and its typed schema                            (leaves only)
==============  ============================================================  ==================

Leaves any layer may use: ``errors`` (``LauncherError``), ``lines`` (JSON-RPC line splitting),
``reasons`` (one-line error reasons); and the package's ``seams`` (fastmcp/mcp internals, a
leaf that imports nothing else of the package). ``tests/test_layout.py`` checks these arrows
and that no module imports another in a circle. A reader's map of a call's path:
``docs/architecture.md``.
"""
