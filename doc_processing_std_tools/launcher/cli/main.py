"""``dpt-launch``: serve the servers named in a YAML config as one MCP server.

Exit status: 0 on a clean stop, 2 for a bad config or command line, 1 when a
server fails at start-up. stdout belongs to the protocol in stdio mode, so every
message goes to stderr (``--check`` prints its table to stdout: it serves nothing).
"""

from __future__ import annotations

import argparse
import difflib
import gc
import logging
import os
import sys
from typing import Any

import anyio
from pydantic import ValidationError

from ... import __version__
from ...shared.tool_call_logs import quiet_tool_call_logs
from .. import hangups
from ..calls.audit import stdout_taken
from ..config.schema import ConfigError, LoadedConfig, load_config
from ..config.transport import TransportConfig
from ..external import child_start, client_hello
from .status import EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from .status import fail as _fail

log = logging.getLogger("dpt-launch")

DESCRIPTION = """\
Mount MCP tool servers (memory-tools, filesystem, popoto-memory, or your own)
into one MCP server, as listed in a YAML config, and serve it to an MCP client.

Quick start:
  dpt-launch init tools.yaml              # write a commented starter config
  dpt-launch --config tools.yaml --check  # validate and list the tools
  dpt-launch --config tools.yaml          # serve over stdio (clients run this)

Client setup (Claude Code; every client's entry, with this install's paths:
dpt-launch client-config CLIENT):
  claude mcp add dpt -- \\
    dpt-launch --config /abs/path/tools.yaml --profile claude-code

Other verbs of dpt-launch (each has --help; F is the config file):
  init [PATH]                     write a commented starter config
  tools --config F [--json]       the composed tool table, without serving
  call --config F TOOL ['{"a": 1}']
                                  call one tool and print the result
  client-config CLIENT --config F [--write]
                                  the snippet for claude-code, claude-desktop,
                                  cursor, vscode, codex or windsurf (--write
                                  merges it)
  connect URL [--token-env VAR]   bridge a stdio client to a running daemon
                                  (client-config CLIENT --url URL prints it)
  login NAME --config F [--no-browser]
                                  OAuth login to a url server with auth: oauth
  login --list --config F         each OAuth server's login state and expiry
  logout NAME --config F          forget that login
  memory copy FROM TO [--merge]   copy a memory-tools store (folder path or
                                  redis://HOST:PORT/DB?namespace=NS), verified
  pin --config F                  write tools.lock: the definitions served now
  pins diff --config F            what differs from tools.lock (exit 1 if any)
  pins approve --config F [SERVER[.NAME]]
                                  take the served definitions into tools.lock
"""

EPILOG = """\
Exit status: 0 clean stop, 1 a server failed to start, 2 bad config/arguments.
Environment: DPTTOOLS_CONFIG (default for --config), DPTTOOLS_MEMORY_DIR,
DPTTOOLS_FS_ROOTS, DPTTOOLS_EVENT_LOOP (asyncio: serve on asyncio's own loop
instead of uvloop's). Config reference: docs/launcher.md.
"""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="dpt-launch",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "-c",
        "--config",
        default=os.environ.get("DPTTOOLS_CONFIG", "tools.yaml"),
        help="YAML file listing the servers to mount (default: $DPTTOOLS_CONFIG or ./tools.yaml)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="validate the config, build every server and print the tool table, then exit",
    )
    parser.add_argument(
        "--transport",
        choices=["stdio", "http"],
        help="override the config's transport (stdio for MCP clients that spawn a command)",
    )
    parser.add_argument("--host", help="HTTP host to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="HTTP port (default 8765; 0 picks a free one)")
    parser.add_argument(
        "--log-level",
        type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="log level on stderr (default: the config's log_level, WARNING)",
    )
    parser.add_argument(
        "--watch",
        action="store_true",
        help="reload the config when the file changes (SIGHUP always reloads it)",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="stop (exit 1) when any server cannot start, not only those marked required",
    )
    parser.add_argument(
        "--profile",
        metavar="NAME",
        help="show the tools as client NAME takes them (its limits: docs/clients.md); over "
        "HTTP every profile is also served at <path>/NAME",
    )
    parser.add_argument("--version", action="version", version=f"dpt-launch {__version__}")
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        parser.error(
            f"unrecognized arguments: {' '.join(unknown)}{_closest_option(parser, unknown)}"
        )
    return args


def _closest_option(parser: argparse.ArgumentParser, unknown: list[str]) -> str:
    """``; did you mean '--config'?`` for a mistyped option (argparse suggests none before 3.14).
    The names are the options' own flags (a dest may differ from its flag)."""
    options = [
        flag
        for action in parser._actions
        for flag in action.option_strings
        if flag.startswith("--")
    ]
    for word in unknown:
        if word.startswith("--"):
            close = difflib.get_close_matches(word.partition("=")[0], options, n=1, cutoff=0.6)
            if close:
                return f"; did you mean {close[0]!r}?"
    return ""


VERBS = (
    "tools",
    "call",
    "client-config",
    "init",
    "connect",
    "login",
    "logout",
    "memory",
    "pin",
    "pins",
)


def run_verb(verb: str, argv: list[str]) -> int:
    """``dpt-launch tools|call|client-config|init ...`` (serving stays the plain form).

    Each verb's module is imported for that verb only: ``init``, ``client-config`` and
    ``connect`` (started per client session) skip compose and fastmcp, ~0.8 s of
    ``python -X importtime``.
    """
    default_config = os.environ.get("DPTTOOLS_CONFIG", "tools.yaml")
    if verb == "memory":
        from . import memory_copy

        _setup_logging("WARNING")
        return memory_copy.main(argv)
    if verb in ("pin", "pins"):
        from . import pins_verbs

        _setup_logging("WARNING")
        return pins_verbs.main(verb, argv, os.environ.get("DPTTOOLS_CONFIG", "tools.yaml"))
    if verb == "connect":
        from . import connect

        args = connect.parse(argv)
        _setup_logging("WARNING")
        return connect.connect(args)
    if verb in ("login", "logout"):
        from . import login

        args = login.parse(verb, argv, default_config)
        _setup_logging("WARNING")
        return login.login(args) if verb == "login" else login.logout(args)
    try:
        if verb == "client-config":
            from . import client_config

            args = client_config.parse(argv, default_config)
            _setup_logging("WARNING")
            return client_config.client_config(args)
        if verb == "init":
            from . import starter_config

            args = starter_config.parse(argv)
            _setup_logging("WARNING")
            return starter_config.init(args)
        from . import tool_verbs

        args = tool_verbs.parse(verb, argv, default_config)
        _setup_logging("WARNING")
        status = anyio.run(tool_verbs.tools if verb == "tools" else tool_verbs.call, args)
        sys.stdout.flush()
        return status
    except BrokenPipeError:  # (`dpt-launch tools --json | head`): the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILURE
    except OSError as exc:  # stdout is a full disk, say
        if exc.filename is not None:
            raise
        return _fail(f"cannot write the output: {exc.strerror or exc}", EXIT_FAILURE)


def event_loop_options() -> dict[str, Any]:
    """anyio's options for serving: uvloop's event loop where it is installed (not on Windows).

    Its loop is C: a relayed call costs the launcher less CPU than on asyncio's own loop, which is
    Python (``benchmarks/external.py``). ``DPTTOOLS_EVENT_LOOP=asyncio`` keeps asyncio's.
    """
    choice = os.environ.get("DPTTOOLS_EVENT_LOOP", "auto").strip().lower()
    if choice == "asyncio" or sys.platform == "win32":
        return {}
    try:
        import uvloop  # noqa: F401  (whether it is installed)
    except ImportError:
        return {}
    return {"use_uvloop": True}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in VERBS:
        return run_verb(argv[0], argv[1:])
    if argv and not argv[0].startswith("-"):  # the plain form takes no positional argument
        return _fail(_not_a_verb(argv[0]), EXIT_USAGE)
    # Start-up allocates much and frees almost nothing: no collections until the
    # composition is built, then what it built is frozen out of later collections.
    gc.disable()
    try:
        return _main(argv)
    finally:
        gc.enable()


def _not_a_verb(word: str) -> str:
    close = difflib.get_close_matches(word, VERBS, n=1, cutoff=0.6)
    hint = f"did you mean '{close[0]}'?" if close else f"the verbs are {', '.join(VERBS)}"
    return f"'{word[:60]}' is not a verb of dpt-launch; {hint} (dpt-launch --help)"


def _main(argv: list[str]) -> int:
    args = parse_args(argv)
    try:
        loaded = load_config(args.config)
    except ConfigError as exc:
        return _fail(str(exc), EXIT_USAGE)
    transport = loaded.config.transport
    overrides = {
        key: value
        for key, value in (("type", args.transport), ("host", args.host), ("port", args.port))
        if value is not None
    }
    if overrides:
        try:
            transport = TransportConfig.model_validate({**transport.model_dump(), **overrides})
        except ValidationError as exc:
            error = exc.errors(include_url=False)[0]
            return _fail(f"--{error['loc'][0]}: {error['msg']}", EXIT_USAGE)
    taken = stdout_taken(loaded, transport.type)  # (audit: stdout over stdio)
    if taken:
        return _fail(taken, EXIT_USAGE)
    level = args.log_level or loaded.config.log_level
    _setup_logging(level)

    try:
        return anyio.run(
            _start_and_run, args, loaded, transport, backend_options=event_loop_options()
        )
    except KeyboardInterrupt:
        return EXIT_OK
    except Exception as exc:  # a server failed to start, e.g. its lifespan raised
        log.debug("start-up failure", exc_info=True)
        cause = _first_leaf(exc)
        return _fail(
            f"{loaded.path}: a server failed: {type(cause).__name__}: {cause}", EXIT_FAILURE
        )


async def _start_and_run(
    args: argparse.Namespace, loaded: LoadedConfig, transport: TransportConfig
) -> int:
    """Start the external commands, then import what serving needs while they boot, then run."""
    if not args.check:
        hangups.defer()  # (a client's SIGHUP while the servers start must not end us)
    if not args.check and transport.type == "stdio":  # (one client: its initialize, early)
        client_hello.listen(loaded.config.start_grace)
    # serving HTTP, a per_client command's first client gets a child started now too
    first_clients = not args.check and transport.type != "stdio"
    await child_start.start_commands(loaded, first_clients)
    try:
        # Imported here: compose and serving bring fastmcp, ~0.8 s (python -X importtime), which
        # --version, --help and a bad config's message need none of, and the commands started
        # above boot meanwhile.
        from .launch import run

        return await run(args, loaded, transport)
    finally:
        await child_start.stop_unclaimed()
        client_hello.forget()


def _first_leaf(exc: BaseException) -> BaseException:
    """The first real error inside (nested) exception groups from task groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


class _OneLineClientErrors(logging.Filter):
    """The mcp SDK's client logs a lost connection to an external server with chained
    tracebacks; the supervisor says the same in one line. (Kept whole at ``log_level: debug``.)"""

    def filter(self, record: logging.LogRecord) -> bool:
        if (
            record.exc_info
            and record.name.startswith("mcp.client")
            and not logging.getLogger().isEnabledFor(logging.DEBUG)
        ):
            error = record.exc_info[1]
            record.msg = f"{record.getMessage()}: {type(error).__name__}: {error}"[:1000]
            record.args = None
            record.exc_info = record.exc_text = None
        return True


def _setup_logging(level: str) -> None:
    """Everything to stderr; fastmcp reads its own level from the environment. (fastmcp keeps its
    rich handler: with FASTMCP_ENABLE_RICH_LOGGING=false a call's arguments reached the
    DEBUG log, tests/launcher/transports/test_http.py)"""
    os.environ.setdefault("FASTMCP_LOG_LEVEL", level)
    os.environ.setdefault("FASTMCP_SHOW_SERVER_BANNER", "false")
    logging.basicConfig(
        stream=sys.stderr, level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    for handler in logging.getLogger().handlers:
        handler.addFilter(_OneLineClientErrors())
    quiet_tool_call_logs()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
