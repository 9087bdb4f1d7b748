"""``dpt-launch`` itself: ``main`` (argv, logging), ``status`` (the exit codes and the one-line
error every verb shares), ``launch`` (compose, then ``--check`` or serve), ``serve`` (a
composition on a transport), the verbs besides serving (``tool_verbs``: ``tools`` and ``call``;
``client_config``; ``starter_config``: ``init``; ``login``; ``memory_copy``), ``report``
(``--check``'s tables), and ``connect`` with its ``upstream`` session.

The top layer: may import everything below it, and nothing imports it.
"""
