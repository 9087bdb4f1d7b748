"""What a tool call ended as, and the attributes its span carries."""

from __future__ import annotations

from enum import StrEnum


class Outcome(StrEnum):
    """What a call ended as: the ``outcome`` label of its metrics and its span's attribute."""

    OK = "ok"
    TOOL_ERROR = (
        "tool_error"  # the tool answered isError (a refusal, a failed store, a remote error)
    )
    TIMEOUT = "timeout"  # servers.<name>.timeout passed while the call ran
    LOCK_TIMEOUT = "lock_timeout"  # the timeout passed while the call waited for the process lock
    UNAVAILABLE = "unavailable"  # the external server was down or restarting, or went away mid-call
    REFUSED = "refused"  # the launcher's rules let no call of it in (an unapproved definition)
    LOCK_LOST = "lock_lost"  # the fleet lock's lease ran out during the call (lock.lease)
    CANCELLED = "cancelled"  # the client cancelled it (or the launcher stopped)
    RATE_LIMITED = "rate_limited"  # over a limit of rate_limits: refused, nothing was done
    DENIED = "denied"  # no rule of access: lets this caller use the tool: refused, nothing done
    ERROR = "error"  # anything else: an unexpected exception


SPAN_SERVER = "dpt.server"  # the mount name (servers.<name>)
SPAN_TOOL = "dpt.tool"  # the exposed tool name
SPAN_OUTCOME = "dpt.outcome"  # an Outcome
