"""FileSystem: every filesystem tool as plain Python (no MCP), raising FileSystemError with the user's message."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass
from .reads import ReadTools
from .walks import WalkTools
from .writes import WriteTools


class FileSystem(ReadTools, WalkTools, WriteTools):
    """The filesystem tools as plain methods. Errors raise :class:`FileSystemError`."""
