"""A tool call the launcher answered with an error, and how it ended."""

from __future__ import annotations

import logging

from fastmcp.exceptions import ToolError

from ...exceptions import DptError
from ...telemetry import Outcome


class CallFailed(DptError, ToolError):
    """The launcher's answer to a call it refused or cut short: its text is what the client
    reads (an ``isError`` result), its :attr:`outcome` what the call's metrics and span record.

    A ``ToolError``, so fastmcp answers it as one on the in-process path; the relayed paths
    answer ``str(error)`` themselves.
    """

    def __init__(self, text: str, outcome: Outcome, *, log_level: int = logging.ERROR) -> None:
        super().__init__(text, log_level=log_level)
        self.outcome = outcome
