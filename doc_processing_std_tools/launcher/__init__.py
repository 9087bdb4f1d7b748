"""The ``dpt-launch`` launcher: config (``config``), composition (``compose``), serving (``serve``), CLI (``cli``)."""
