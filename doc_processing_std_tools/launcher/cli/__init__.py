"""``dpt-launch`` itself: ``main`` (argv, logging), ``status`` (the exit codes and the one-line
error every verb shares), ``serve`` (a composition on a transport), the verbs besides serving (``verbs``: ``tools``, ``call``, ``client-config``,
``init``), ``report`` (``--check``'s tables), and ``connect`` with its ``upstream`` session.

The top layer: may import everything below it, and nothing imports it.
"""
