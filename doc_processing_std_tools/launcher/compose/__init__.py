"""One FastMCP root from every configured server: ``composition`` builds and mounts them
(``building``, ``mounting``, ``exposure``: namespaces and collisions, ``lock_policy``: the process
lock, ``telemetry_setup``, ``instructions``), ``sessions`` tracks connected clients,
``reload`` applies a changed config to a running composition.

May import ``external``, ``transports``, ``config`` and the package's servers; never ``cli``.
"""

from .building import ServerStartError
from .composition import Composition, compose
from .exposure import CompositionError
from .mount import Mount

__all__ = ["Composition", "CompositionError", "Mount", "ServerStartError", "compose"]
