"""Shared pieces of every server's ``Settings`` model: strict keys and path resolution."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationInfo


class ServerSettings(BaseModel):
    """Base for server settings: unknown keys are errors, and a validated instance is frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def base_dir(info: ValidationInfo | None) -> Path:
    """The folder relative paths resolve against: the config file's folder, else the cwd."""
    context = (info.context if info else None) or {}
    return Path(context.get("base_dir") or os.getcwd())


def resolve_path(value: str | os.PathLike[str], info: ValidationInfo | None) -> Path:
    """Expand ``~`` and make *value* absolute against :func:`base_dir` (symlinks are kept)."""
    path = Path(value).expanduser()
    if not path.is_absolute():
        path = base_dir(info) / path
    return Path(os.path.normpath(path))
