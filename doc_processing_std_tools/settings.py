"""What every server's ``Settings`` model shares: strict keys, and one rule for paths.

Third-party servers use both: subclass :class:`ServerSettings` and annotate path
settings with :data:`ConfigPath`, so ``notes_dir: ./notes`` in a launcher config
means the folder next to that config file, whatever the working directory.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationInfo


class ServerSettings(BaseModel):
    """Base for server settings: unknown keys are errors, defaults are validated like
    given values (so a :data:`ConfigPath` default resolves too), and a validated
    instance is frozen (immutable), so a server can keep it without copying."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


def base_dir(info: ValidationInfo | None) -> Path:
    """The folder relative paths resolve against: the config file's folder, else the cwd.

    Args:
        info: pydantic's validation info; its context's ``base_dir`` is the config file's folder.

    Returns:
        That folder, or the working directory when validation has no such context.
    """
    context = (info.context if info else None) or {}
    return Path(context.get("base_dir") or os.getcwd())


def resolve_path(value: str | os.PathLike[str], info: ValidationInfo | None) -> Path:
    """Expand ``~`` and make *value* absolute against :func:`base_dir` (symlinks are kept).

    Args:
        value: The path as given in the settings.
        info: pydantic's validation info (see :func:`base_dir`).

    Returns:
        The absolute, normalized path; it need not exist.
    """
    path = Path(value).expanduser()
    if not path.is_absolute():
        path = base_dir(info) / path
    return Path(os.path.normpath(path))


ConfigPath = Annotated[Path, AfterValidator(resolve_path)]
"""A path setting: ``~`` expanded, relative paths resolved against the launcher config
file's folder (the working directory when the settings come from elsewhere). In a
:class:`ServerSettings` model defaults go through the same rule, so ``notes_dir:
ConfigPath = Path("notes")`` is next to the config too. The path need not exist;
symlinks are kept (containment resolves them at use)."""
