"""The operator console at ``/ui`` (docs/ui.md): server-rendered pages over the daemon's own
state, served by the HTTP transport behind the same guards as ``/mcp``.

What it reads of the composition comes in as a :class:`~.sources.ConsoleSources` (the transports
layer cannot import ``compose``); :func:`~.pages.console_routes` makes the routes.
"""

from .pages import console_routes
from .sources import ConsoleSources

__all__ = ["ConsoleSources", "console_routes"]
