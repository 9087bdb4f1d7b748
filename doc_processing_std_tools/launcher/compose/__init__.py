"""One FastMCP root from every configured server: ``composition`` builds and mounts them
(namespaces, collisions, the process lock, timeouts), ``sessions`` tracks connected clients,
``reload`` applies a changed config to a running composition.

May import ``external``, ``transports``, ``config`` and the package's servers; never ``cli``.
"""

from .composition import Composition, CompositionError, Mount, ServerStartError, compose

__all__ = ["Composition", "CompositionError", "Mount", "ServerStartError", "compose"]
