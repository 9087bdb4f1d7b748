"""The MCP wiring every built-in server shares, so each server module holds only its own.

* :func:`tool_annotations`: the one spelling of tool annotations (hints are explicit, and
  ``openWorldHint`` is false: these tools touch only local state).
* :func:`tool_errors`: a server's domain errors become ``ToolError`` with text a client
  can always receive (bounded, UTF-8 safe), never a traceback.
* :func:`lazy_server`: the module-level ``memory_server``-style export, built on first
  access (importing the package stays cheap) and exactly once across threads.
* :func:`main`: the standard ``python -m`` / console-script entry point: logs on
  stderr, a settings error in one line, serve over stdio.
* :class:`ServerModule`: all of the above for one server package at once: its ``SPEC``
  (read from the package like any third-party server module), ``standalone_server``,
  the lazy module-level server and ``main()``.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from pydantic import ValidationError

from ..servers import spec_from_module
from ..telemetry import note_store_fault
from .argument_errors import refused
from .client_text import bounded, sendable
from .tool_call_logs import quiet_tool_call_logs

if TYPE_CHECKING:
    from fastmcp import FastMCP
    from mcp.types import ToolAnnotations

    from ..servers import ServerSpec

P = ParamSpec("P")
R = TypeVar("R")


def tool_annotations(
    *, read_only: bool, destructive: bool = False, idempotent: bool = False
) -> ToolAnnotations:
    """Tool annotations; a read-only tool is idempotent and not destructive by definition."""
    # (here, not at the top: the servers import this module; mcp's types take 0.55 s)
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
    """Turn *errors* raised by the wrapped call into a refusal (:func:`errors.refused`: an
    ``isError`` result whose text is the message alone, logged at DEBUG only), and make
    string results sendable."""

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(fn)
        def call(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                result = fn(*args, **kwargs)
            except errors as exc:
                note_store_fault(exc)
                raise refused(sendable(bounded(str(exc)))) from None
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
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("-h", "--help"):
        print(f"usage: serves the {name} MCP server over stdio (settings from the environment)")
        raise SystemExit(0)
    # (before build() imports fastmcp, which reads it: its INFO banner line is no news)
    os.environ.setdefault("FASTMCP_LOG_LEVEL", "WARNING")
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    quiet_tool_call_logs()
    try:
        server = build()
    except (ValidationError, ValueError) as exc:
        print(f"{name}: {_first_line(exc)}", file=sys.stderr)
        raise SystemExit(2) from None
    server.run(transport="stdio", show_banner=False)


def _first_line(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        error = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in error["loc"])
        message = error["msg"].removeprefix("Value error, ")  # (pydantic's, for a ValueError)
        return f"{where}: {message}" if where else message
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


class ServerModule:
    """The standard exports of a server package, made in one place.

    ``spec`` is read from the package as :func:`~.servers.spec_from_module` reads a
    third-party server module (``create_server``, ``Settings``, ``check``, ``describe``,
    ``ONE_PER_PROCESS``, ``LOCKS_ITSELF``, ``EXTRA``), so create it after those are
    imported. The package then exports ``SPEC = server.spec``, ``standalone_server``,
    ``main`` and ``__getattr__ = server.module_getattr`` (the lazy *export*).
    """

    def __init__(
        self,
        module_name: str,
        name: str,
        *,
        export: str,
        follow_client_roots: bool = True,
        settings_from_args: Callable[[list[str]], Any] | None = None,
    ) -> None:
        self.spec: ServerSpec = spec_from_module(sys.modules[module_name], name)
        self.follow_client_roots = follow_client_roots
        self.settings_from_args = settings_from_args
        self.module_getattr = lazy_server(module_name, export, self.standalone_server)

    def standalone_server(self, args: Sequence[str] = ()) -> FastMCP:
        """The server on its own: settings from *args* where the server takes any (e.g. the
        filesystem's roots), else from the environment; following the client's MCP roots
        when *follow_client_roots*."""
        if args and self.settings_from_args is not None:
            settings = self.settings_from_args(list(args))
        else:
            assert self.spec.settings is not None  # a server package has a Settings model
            settings = self.spec.settings()
        server = self.spec.create(settings)
        if self.follow_client_roots:
            # (here, not at the top: importing a server package must not load fastmcp, 0.25 s)
            from .roots_watch import watch_client_roots

            server = watch_client_roots(server)
        return server

    def main(self, argv: Sequence[str] | None = None) -> None:
        """``dpt-<server>`` / ``python -m``: serve over stdio (see :func:`main`). An option (or,
        for a server that takes no arguments, any argument) is refused: served anyway, or taken
        for a root, it would hide the mistake (so ``--`` and roots starting with ``-`` are too:
        ``./-dir`` is the way to name one, as the error says)."""
        args = list(sys.argv[1:] if argv is None else argv)
        given = [arg for arg in args if arg not in ("-h", "--help")]
        wrong = [arg for arg in given if arg.startswith("-")] or (
            given if self.settings_from_args is None else []
        )

        def build() -> FastMCP:
            if not wrong:
                return self.standalone_server(args)
            said = (
                f"it takes no arguments (given: {' '.join(wrong)[:200]})"
                if self.settings_from_args is None
                else f"unknown option {wrong[0][:100]!r} (a root folder whose name starts "
                "with '-': give it as ./-name)"
            )
            # (main answers -h first, then this as a settings error: one line, exit 2)
            raise ValueError(
                f"{said}; its settings come from the environment (docs/servers/{self.spec.name}.md)"
            )

        main(self.spec.name, build, args)
