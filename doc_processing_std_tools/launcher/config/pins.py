"""The ``pins:`` section: what happens to a tool, prompt or resource template whose definition
differs from the one a person approved (``launcher/calls/pins.py``, docs/trust.md).

Example::

    pins:
      policy: block        # or warn: serve it anyway, with a WARNING line
      lock_file: tools.lock  # beside the config (written by dpt-launch pin)
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

LOCK_FILE_NAME = "tools.lock"
PinsPolicy = Literal["block", "warn"]
DEFAULT_PINS_POLICY: PinsPolicy = "block"


class PinsConfig(BaseModel):
    """``pins:``: ``block`` (the default) serves only approved definitions; ``warn`` serves the
    rest with a WARNING line. Without the lock file nothing is pinned; hidden text still counts."""

    model_config = ConfigDict(extra="forbid", defer_build=True)  # (as StrictModel's)

    policy: PinsPolicy = DEFAULT_PINS_POLICY
    lock_file: str = Field(LOCK_FILE_NAME, min_length=1)  # relative to the config's folder

    def lock_path(self, base_dir: Path) -> Path:
        """The lock file's path (a relative one is the config's folder's)."""
        return base_dir / Path(self.lock_file).expanduser()
