"""The operator console at ``/ui`` (docs/ui.md): server-rendered pages over the daemon's own
state, served by the HTTP transport behind the same guards as ``/mcp``.

What it reads of the composition comes in as a :class:`~.sources.ConsoleSources` (the transports
layer cannot import ``compose``); :func:`~.pages.console_routes` makes the routes (imported
only by an HTTP app that serves the console: Jinja2 costs ~50 ms of import time).
"""

from .sources import ConsoleSources

__all__ = ["ConsoleSources"]
