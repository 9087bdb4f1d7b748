"""A failed tool call, resource read or prompt logged as one plain line on our own logger, not
as fastmcp's rich record.

fastmcp logs ``Error calling tool '<name>'`` (and ``Error reading resource``, ``Error rendering
prompt``) with a rich traceback for every call that fails, the ordinary refusals included.
The launcher and each standalone server install :func:`quiet_tool_call_logs` with their
logging set-up.
"""

from __future__ import annotations

import logging
import sys
from contextlib import suppress

TOOL_CALL_LOGGER = (
    "fastmcp.server.server"  # logs "Error calling tool '<name>'" for each failed call
)
_TOOL_LOG = logging.getLogger("doc_processing_std_tools.tools")
READ_OR_RENDER = ("Error reading resource", "Error rendering prompt")
LOGGED_MARK = "_dpt_logged"  # set on an exception once its line is logged


class _ToolCallLogs(logging.Filter):
    """fastmcp's line for a failed tool call, made one plain line on our own logger.

    A ``ToolError`` raised below WARNING (:func:`errors.refused`) is an ordinary answer:
    one DEBUG line, without its text (it may repeat the arguments). Any other
    ``ToolError`` is a WARNING with its text; an unexpected exception is one ERROR
    line with its type and text (the traceback only at DEBUG). fastmcp's own rich
    record is dropped.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if not isinstance(record.msg, str):
            return True
        if record.msg.startswith(READ_OR_RENDER):
            return _one_line_read_error(record)
        if not record.msg.startswith("Error calling tool"):
            return True
        head = record.getMessage()
        error = record.exc_info[1] if record.exc_info else sys.exc_info()[1]
        text = " ".join(str(error).split())[:1000] if error is not None else ""
        if record.levelno < logging.WARNING:
            _TOOL_LOG.debug("%s: refused (an error result, as the tool means to)", head)
        elif record.exc_info:
            _TOOL_LOG.error("%s: %s: %s", head, type(error).__name__, text)
            _TOOL_LOG.debug("the traceback of %s", head, exc_info=record.exc_info)
        elif text.startswith(head):
            _TOOL_LOG.log(logging.WARNING, "%s", text)
        else:
            _TOOL_LOG.log(logging.WARNING, "%s: %s", head, text)
        return False


def _one_line_read_error(record: logging.LogRecord) -> bool:
    """fastmcp's rich record for a failed resource read or prompt, as one plain line.

    A mounted server's error is logged by each server it passes through (the mounted one, then
    the launcher's root): the same exception is told once, under the first (the server's own)
    name. The traceback is kept for DEBUG.
    """
    error = record.exc_info[1] if record.exc_info else None
    if error is None:
        return True
    if getattr(error, LOGGED_MARK, False):
        return False
    with suppress(AttributeError):  # (an exception with __slots__ is told each time)
        setattr(error, LOGGED_MARK, True)
    head = record.getMessage()
    text = " ".join(str(error).split())[:1000]
    _TOOL_LOG.log(record.levelno, "%s: %s: %s", head, type(error).__name__, text)
    _TOOL_LOG.debug("the traceback of %s", head, exc_info=record.exc_info)
    return False


def quiet_tool_call_logs() -> None:
    """Log failed tool calls as :class:`_ToolCallLogs` says, not as fastmcp's rich records.

    Installed by the launcher's and each standalone server's logging setup (idempotent).
    """
    logger = logging.getLogger(TOOL_CALL_LOGGER)
    if not any(isinstance(f, _ToolCallLogs) for f in logger.filters):
        logger.addFilter(_ToolCallLogs())
