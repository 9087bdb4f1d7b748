"""The MCP wiring every built-in server shares, so each server module holds only its own.

* :func:`tool_annotations`: the one spelling of tool annotations (hints are explicit, and
  ``openWorldHint`` is false: these tools touch only local state).
* :func:`tool_errors`: a server's domain errors become ``ToolError`` with text a client
  can always receive (bounded, UTF-8 safe), never a traceback.
* :func:`lazy_server`: the module-level ``memory_server``-style export, built on first
  access (importing the package stays cheap) and exactly once across threads.
* :func:`main`: the standard ``python -m`` / console-script entry point: logs on
  stderr, a settings error in one line, serve over stdio.
"""

from __future__ import annotations

import functools
import logging
import sys
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from .text import bounded, sendable

if TYPE_CHECKING:
    from fastmcp import FastMCP
    from mcp.types import ToolAnnotations

P = ParamSpec("P")
R = TypeVar("R")


def tool_annotations(
    *, read_only: bool, destructive: bool = False, idempotent: bool = False
) -> ToolAnnotations:
    """Tool annotations; a read-only tool is idempotent and not destructive by definition."""
    from mcp.types import ToolAnnotations

    if read_only:
        destructive, idempotent = False, True
    return ToolAnnotations(
        read_only_hint=read_only,
        destructive_hint=destructive,
        idempotent_hint=idempotent,
        open_world_hint=False,
    )


def tool_errors(
    *errors: type[Exception],
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Turn *errors* raised by the wrapped call into ``ToolError`` (an ``isError`` result
    whose text is the message alone), and make string results sendable."""

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(fn)
        def call(*args: P.args, **kwargs: P.kwargs) -> R:
            from fastmcp.exceptions import ToolError

            try:
                result = fn(*args, **kwargs)
            except errors as exc:
                raise ToolError(sendable(bounded(str(exc)))) from None
            return sendable(result) if isinstance(result, str) else result  # type: ignore[return-value]

        return call

    return decorate


def lazy_server(
    module_name: str, export: str, build: Callable[[], FastMCP]
) -> Callable[[str], Any]:
    """A module ``__getattr__`` that builds *export* on first access, once, and keeps it."""
    lock = threading.Lock()

    def __getattr__(name: str) -> Any:
        if name != export:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        module = sys.modules[module_name]
        with lock:
            server = module.__dict__.get(export)
            if server is None:
                server = build()
                setattr(module, export, server)
        return server

    return __getattr__


def main(name: str, build: Callable[[], FastMCP], argv: Sequence[str] | None = None) -> None:
    """Serve the server *build* makes over stdio: the body of every ``dpt-<server>`` script.

    A settings error is one line on stderr and exit 2; logs go to stderr (stdout is
    the protocol).
    """
    from pydantic import ValidationError

    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("-h", "--help"):
        print(f"usage: serves the {name} MCP server over stdio (settings from the environment)")
        raise SystemExit(0)
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    try:
        server = build()
    except (ValidationError, ValueError) as exc:
        print(f"{name}: {_first_line(exc)}", file=sys.stderr)
        raise SystemExit(2) from None
    server.run(transport="stdio", show_banner=False)


def _first_line(exc: Exception) -> str:
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        error = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in error["loc"])
        return f"{where}: {error['msg']}" if where else error["msg"]
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
