"""``dpt-launch`` itself: ``main`` (argv, logging, exit codes), ``serve`` (a composition on a
transport), the verbs besides serving (``verbs``: ``tools``, ``call``, ``client-config``,
``init``), ``report`` (``--check``'s tables), and ``connect`` with its ``upstream`` session.

The top layer: may import everything below it, and nothing imports it.
"""
