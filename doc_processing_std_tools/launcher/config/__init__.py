"""The launcher's config: the YAML file as text (``yaml_file``) and its typed schema (``schema``, with
``transport`` for the ``transport:`` section and ``model_base`` for what every model shares).

May import the launcher's leaves only (``reasons``), never another folder. The names below are the config's public face.
"""

from .schema import (
    ConfigError,
    LauncherConfig,
    LoadedConfig,
    ServerEntry,
    describe_validation_error,
    load_config,
)
from .transport import TransportConfig

__all__ = [
    "ConfigError",
    "LauncherConfig",
    "LoadedConfig",
    "ServerEntry",
    "TransportConfig",
    "describe_validation_error",
    "load_config",
]
