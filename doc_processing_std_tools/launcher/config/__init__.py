"""The launcher's config: the YAML file as text (``yaml_file``) and its typed schema (``schema``).

May import the launcher's leaves only (``reasons``), never another folder. The names below are the config's public face.
"""

from .schema import (
    ConfigError,
    LoadedConfig,
    ServerEntry,
    TransportConfig,
    describe_validation_error,
    load_config,
)

__all__ = [
    "ConfigError",
    "LoadedConfig",
    "ServerEntry",
    "TransportConfig",
    "describe_validation_error",
    "load_config",
]
