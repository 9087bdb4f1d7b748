"""The ``dpt-launch`` launcher, in layers; a module imports only its own layer and those below it.

==============  ============================================================  ==================
folder          what it holds                                                 may import
==============  ============================================================  ==================
``cli/``        argv, the verbs (``tools``, ``call``, ``init``, ...),          everything below
                ``serve`` (a composition on a transport), ``connect``
``compose/``    building every server into one FastMCP root, the sessions     external, transports,
                registry, reload                                              config
``transports/`` stdio and streamable HTTP: bytes and requests in and out      external, config
``external/``   ``command:`` and ``url:`` servers: supervision, child          config
                processes, relayed calls and the stdio fast path
``config/``     the YAML file and its typed schema                            (leaves only)
==============  ============================================================  ==================

Leaves any layer may use: ``lines`` (JSON-RPC line splitting), ``reasons`` (one-line
error reasons), and the package's ``seams`` (fastmcp/mcp internals). ``tests/test_layout.py``
checks these arrows and that no module imports another in a circle. A reader's map of a
call's path: ``docs/architecture.md``.
"""
