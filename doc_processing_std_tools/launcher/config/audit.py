"""``audit:``: the audit log's config (docs/trust.md#audit-log)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from .model_base import StrictModel

AUDIT_STDOUT = "stdout"  # audit.path: the lines go to standard output (containers)


class AuditConfig(StrictModel):
    """The audit log (``audit:``): one JSON line per tool call (docs/trust.md#audit-log)."""

    path: str  # a file (relative to the config's folder), or ``stdout``
    max_bytes: int = Field(10 * 1024 * 1024, ge=0)  # rotate before the file passes it; 0: never
    backups: int = Field(5, ge=0)  # rotated files kept (FILE.1 ... FILE.N)
    arguments: bool = False  # the call's arguments in each line (their size and hash always)
    fsync: bool = False  # each line reaches the disk before its answer (survives a power loss)

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        return {"path": value} if isinstance(value, str) else value

    @field_validator("path")
    @classmethod
    def _not_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("give a file for the audit lines, or stdout")
        return value
