"""The filesystem server's settings: its roots (setting, variable, client roots, project folder), limits, and the --check hooks."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field, ValidationInfo, field_validator, model_validator

from ..settings import resolve_path
from ..shared import workspace
from ..shared.reply_bounds import ReplyLimits

if TYPE_CHECKING:
    pass


SERVER_NAME = "filesystem"


# Every state-changing tool takes locking.PROCESS_LOCK itself, so the launcher must
# not hold it around them (the lock is not re-entrant: that would deadlock).
LOCKS_ITSELF = True


ROOTS_ENV = "DPTTOOLS_FS_ROOTS"


def _default_roots() -> list[str]:
    """From the environment, relative to the working directory (as for DPTTOOLS_MEMORY_DIR).

    Empty when unset: the client's roots, then the working directory, are chosen
    when the server is built (:func:`fixed_roots`), never here.
    """
    value = os.environ.get(ROOTS_ENV, "")
    return [os.path.abspath(os.path.expanduser(p)) for p in value.split(os.pathsep) if p.strip()]


class Settings(ReplyLimits):
    """Settings of the ``filesystem`` server (with the reply caps of :class:`ReplyLimits`)."""

    roots: list[Path] = Field(
        default_factory=_default_roots,
        validate_default=True,
        description=(
            f"Folders the tools may use (relative ones against the config file's folder). "
            f"Default: ${ROOTS_ENV} ({os.pathsep}-separated), else the client's MCP roots, "
            "else the working directory when it is a project folder (never /, your home "
            "folder, a system or cache folder)."
        ),
    )
    read_only: bool = Field(False, description="Register only the tools that do not write.")
    max_read_bytes: int = Field(
        5 * 1024 * 1024,
        gt=0,
        description="Largest file read whole; bigger ones need head or tail.",
    )
    max_entries: int = Field(
        10_000, gt=0, description="Most entries directory_tree and search_files visit."
    )

    @field_validator("roots", mode="before")
    @classmethod
    def _split_string(cls, value: Any) -> Any:
        if isinstance(value, str | os.PathLike):
            return [part for part in os.fspath(value).split(os.pathsep) if part.strip()]
        return value

    @field_validator("roots")
    @classmethod
    def _resolve_roots(cls, value: list[Path], info: ValidationInfo) -> list[Path]:
        resolved = []
        for root in value:
            path = resolve_path(root, info)
            if not path.is_dir():
                problem = "does not exist" if not path.exists() else "is not a folder"
                raise ValueError(f"root {str(path)!r} {problem}")
            resolved.append(path)
        return resolved

    @model_validator(mode="after")
    def _roots_not_empty(self) -> Settings:
        if "roots" in self.model_fields_set and not self.roots:
            raise ValueError(
                f"roots must list at least one folder; leave it out to use ${ROOTS_ENV} "
                "or the client's roots"
            )
        return self


def fixed_roots(settings: Settings) -> tuple[str, list[Path], str | None]:
    """(source, roots, why the working directory is not used), known before any client.

    The source is ``setting``, ``variable``, ``working directory`` (used only when
    the client sends no roots) or ``none``.
    """
    if settings.roots:
        source = "setting" if "roots" in settings.model_fields_set else "variable"
        return source, list(settings.roots), None
    cwd = Path(os.getcwd())
    reason = workspace.unsuitable_reason(cwd)
    if reason is None:
        return "working directory", [cwd], None
    return "none", [], f"the working directory {cwd} is not used: {reason}"


def no_roots_message(why: str | None) -> str:
    """The one-line fix shown whenever no folder is allowed."""
    return (
        "No folder is allowed: set 'roots' in the filesystem settings of the dpt-launch "
        f"config or ${ROOTS_ENV}, or use a client that sends MCP roots"
        + (f" ({why})" if why else "")
    )


def _roots_row(settings: Settings) -> str:
    source, roots, why = fixed_roots(settings)
    joined = ", ".join(str(root) for root in roots)
    if source == "setting":
        return f"{joined} (setting)"
    if source == "variable":
        return f"{joined} (variable ${ROOTS_ENV})"
    if source == "working directory":
        return f"the client's roots when it sends them, else the working directory {joined}"
    return f"none yet: the client's roots when it sends them ({why})"


def describe(settings: Settings) -> list[tuple[str, str]]:
    """Rows for ``dpt-launch --check``: where the roots come from, mode and limits.

    Args:
        settings: Validated settings.

    Returns:
        ``(label, value)`` rows.
    """
    return [
        ("roots", _roots_row(settings)),
        ("mode", "read-only" if settings.read_only else "read-write"),
        ("limits", f"read {settings.max_read_bytes} bytes, list {settings.max_entries} entries"),
    ]


def check(settings: Settings) -> list[tuple[str, str]]:
    """(level, message) problems for ``dpt-launch --check``: a WARN when no root is known yet.

    Args:
        settings: Validated settings.

    Returns:
        One WARN when neither the settings, the variable nor the working directory give a
        root (the client's roots may still come); else nothing.
    """
    source, _roots, why = fixed_roots(settings)
    if source != "none":
        return []
    return [
        (
            "WARN",
            f"no root yet; {why}; the client's roots will be used if it sends "
            f"them (or set 'roots' or ${ROOTS_ENV})",
        )
    ]
