"""``dpt-launch`` verbs besides serving: ``tools``, ``call``, ``client-config`` and ``init``.

Each verb is a function taking its parsed arguments and returning an exit status.
Results go to stdout (nothing is served, so stdout is free); errors go to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import shutil
import stat
import sys
import time
from pathlib import Path
from typing import Any

from ..config.schema import ConfigError, LoadedConfig, ServerEntry, load_config
from .connect import TOKEN_PLACEHOLDER
from .status import EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from .status import fail as _fail

CLIENTS = ("claude-code", "claude-desktop", "cursor", "vscode", "codex", "windsurf")
CLIENT_ENTRY_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # a bare TOML key, a JSON key


async def _composed(config: str | LoadedConfig, only: set[str] | None = None) -> Any:
    """The composition of *config* (of the servers in *only*), or the exit status after printing
    why there is none."""
    from ..compose import CompositionError, ServerStartError, compose
    from ..compose.profile_names import plain_problems

    try:
        loaded = config if isinstance(config, LoadedConfig) else load_config(config)
        with contextlib.redirect_stdout(sys.stderr):
            composition = await compose(loaded, only=only)
    except ConfigError as exc:
        return _fail(str(exc), EXIT_USAGE)
    except (CompositionError, ServerStartError) as exc:
        return _fail(f"{loaded.path}: {exc}", EXIT_USAGE)
    problems = plain_problems(composition.mounts)
    if problems:
        await composition.aclose()
        return _fail(f"{loaded.path}: {problems[0]}", EXIT_USAGE)
    return composition


def could_expose(entry: ServerEntry, name: str) -> bool:
    """Whether an external server could expose a tool called *name*, judged from its config
    alone (its namespace prefix and ``tools:`` globs), without starting it."""
    own = name
    if entry.namespace:
        if not name.startswith(f"{entry.namespace}_"):
            return False
        own = name.removeprefix(f"{entry.namespace}_")
    return entry.tools.admits(own)


async def _owner_composition(config: str, tool: str) -> tuple[Any, set[str]]:
    """A composition holding *tool*'s server, started as little as possible, and every tool
    name seen on the way (for a typo's suggestion).

    In-process servers are built first: that is cheap and starts nothing. Only when none of
    them has the tool are external servers started, and only those whose namespace and
    ``tools:`` globs admit the name (an npx server can take seconds to start).
    """
    try:
        loaded = load_config(config)
    except ConfigError as exc:
        return _fail(str(exc), EXIT_USAGE), set()
    enabled = {name: e for name, e in loaded.config.servers.items() if e.enabled}
    in_process = {name for name, e in enabled.items() if not e.external}
    candidates = {name for name, e in enabled.items() if e.external and could_expose(e, tool)}
    seen: set[str] = set()
    for only in (in_process, candidates):
        if not only:
            continue
        composition = await _composed(loaded, only)
        if isinstance(composition, int):
            return composition, seen
        names = {row["name"] for row in _tool_rows(composition)}
        if tool in names:
            return composition, seen
        seen |= names
        await composition.aclose()
    return None, seen


def shown_names(composition: Any) -> dict[str, str]:
    """Each exposed tool's name as a client naming no profile sees it (compose/profile_names.py)."""
    from ..compose.profile_names import plain_names

    names = [t.name for m in composition.mounts for t in m.tools]
    plain = plain_names(names)
    return dict(zip(names, names, strict=True)) if plain is None else plain.shown


def _tool_rows(composition: Any) -> list[dict[str, Any]]:
    rows = []
    shown = shown_names(composition)
    for mount in composition.mounts:
        for tool in mount.tools:
            if tool.name not in shown:
                continue
            hints = tool.annotations
            rows.append(
                {
                    "server": mount.name,
                    "name": shown[tool.name],
                    "own_name": own_name(mount.entry, tool.name),
                    "read_only": bool(hints and hints.read_only_hint),
                    "destructive": bool(hints and hints.destructive_hint),
                    "locked": tool.name in mount.locked,
                    "description": " ".join((tool.description or "").split()),
                    "annotations": hints.model_dump(by_alias=True, exclude_none=True)
                    if hints
                    else {},
                    "inputSchema": tool.parameters,
                    "outputSchema": tool.output_schema,
                }
            )
    return rows


def own_name(entry: ServerEntry, name: str) -> str:
    """The server's own name for the exposed tool *name* (its namespace taken off)."""
    return name.removeprefix(f"{entry.namespace}_") if entry.namespace else name


def _no_such_tool(name: str, known: set[str]) -> int:
    import difflib

    close = difflib.get_close_matches(name, sorted(known), n=3, cutoff=0.8)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return _fail(f"no tool {name!r}{hint} (see: dpt-launch tools)", EXIT_USAGE)


async def tools(args: argparse.Namespace) -> int:
    """The composed tool table, or with NAME one tool's parameters, without serving."""
    if args.budget is not None:
        return await _budget(args)
    if args.name:
        composition, known = await _owner_composition(args.config, args.name)
        if composition is None:
            return _no_such_tool(args.name, known)
    else:
        composition = await _composed(args.config)
    if isinstance(composition, int):
        return composition
    try:
        rows = _tool_rows(composition)
        if args.name:
            row = next(row for row in rows if row["name"] == args.name)
            if args.json:
                print(json.dumps(row, indent=2))
            else:
                _print_tool(row, composition.loaded.path)
            return EXIT_OK
        if args.json:
            print(json.dumps(rows, indent=2))
            return EXIT_OK
        from rich.console import Console
        from rich.markup import escape
        from rich.table import Table

        renamed = any(row["own_name"] != row["name"] for row in rows)
        table = Table(title="Tools", title_justify="left")
        columns = ("server", "tool", *(("server's name",) if renamed else ()), "read-only")
        for column in (*columns, "destructive", "description"):
            table.add_column(column, overflow="fold")
        for row in rows:
            own = row["own_name"] if row["own_name"] != row["name"] else ""
            table.add_row(
                escape(row["server"]),
                escape(row["name"]),
                *((escape(own),) if renamed else ()),
                "yes" if row["read_only"] else "",
                "yes" if row["destructive"] else "",
                escape(row["description"].split(". ")[0]),
            )
        Console(highlight=False, width=max(120, Console().width)).print(table)
        return EXIT_OK
    finally:
        await composition.aclose()


async def _budget(args: argparse.Namespace) -> int:
    """``tools --budget [PROFILE]``: estimated tokens per tool and server, the profile's limits."""
    from ..compose.profiles import ProfileError, resolve
    from .budget import budget, print_budget

    composition = await _composed(args.config)
    if isinstance(composition, int):
        return composition
    try:
        if args.budget:
            resolve(composition.loaded.config, args.budget)
        report = budget(composition, args.budget or None)
    except ProfileError as exc:
        return _fail(str(exc), EXIT_USAGE)
    finally:
        await composition.aclose()
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_budget(report)
    return EXIT_OK


def _print_tool(row: dict[str, Any], config: Path) -> None:
    """One tool for a person: what it does, its parameters, its hints, a call to copy."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from .tool_help import example_arguments, parameter_rows

    console = Console(highlight=False, width=max(100, Console().width))
    own = f", its own name {escape(row['own_name'])}" if row["own_name"] != row["name"] else ""
    console.print(f"[bold]{escape(row['name'])}[/bold] (server {escape(row['server'])}{own})\n")
    console.print(escape(row["description"]) or "(no description)", "\n")
    parameters = parameter_rows(row["inputSchema"])
    if parameters:
        table = Table(title="Parameters", title_justify="left")
        for column in ("name", "type", "required", "default", "description"):
            table.add_column(column, overflow="fold")
        for name, kind, required, default, text in parameters:
            cells = (name, kind.replace("`", ""), "yes" if required else "", default, text)
            table.add_row(*(escape(" ".join(cell.split())) for cell in cells))
        console.print(table)
    else:
        console.print("Parameters: none")
    hints = row["annotations"]

    def said(key: str) -> str:
        return {True: "yes", False: "no"}.get(hints.get(key), "not declared")

    console.print(
        f"\nAnnotations: read-only {said('readOnlyHint')}, destructive {said('destructiveHint')}, "
        f"idempotent {said('idempotentHint')}, open world {said('openWorldHint')}"
        + ("; runs under the process lock" if row["locked"] else "")
    )
    arguments = json.dumps(example_arguments(row["inputSchema"]), ensure_ascii=False)
    line = shlex.join(["dpt-launch", "call", "--config", str(config), row["name"], arguments])
    console.print("\nExample (placeholders for the required parameters):")
    console.print(f"  {escape(line)}", soft_wrap=True)  # one line, to copy whole


async def call(args: argparse.Namespace) -> int:
    """Build, call one tool in-process, print its result; exit 1 when it is an error."""
    from fastmcp import Client

    try:
        arguments = json.loads(args.arguments) if args.arguments else {}
    except json.JSONDecodeError as exc:
        return _fail(f"the arguments are not JSON: {exc.msg} at character {exc.pos}", EXIT_USAGE)
    if not isinstance(arguments, dict):
        return _fail('the arguments must be a JSON object, e.g. \'{"key": "value"}\'', EXIT_USAGE)
    composition, known = await _owner_composition(args.config, args.tool)
    if isinstance(composition, int):
        return composition
    if composition is None:
        return _no_such_tool(args.tool, known)
    try:
        import logging

        logging.getLogger("fastmcp").setLevel(logging.CRITICAL)  # the result says it once
        exposed = {shown: name for name, shown in shown_names(composition).items()}[args.tool]
        with contextlib.redirect_stdout(sys.stderr):
            async with Client(composition.root) as client:
                result = await client.call_tool(exposed, arguments, raise_on_error=False)
        if result.structured_content is not None and not result.is_error:
            print(json.dumps(result.structured_content, indent=2, ensure_ascii=False))
        else:
            text = "\n".join(getattr(block, "text", "") for block in result.content)
            print(text, file=sys.stderr if result.is_error else sys.stdout)
        return EXIT_FAILURE if result.is_error else EXIT_OK
    finally:
        await composition.aclose()


# -- client-config -------------------------------------------------------------------


def _launcher_path() -> str:
    """This interpreter's ``dpt-launch`` (absolute), else the name on PATH."""
    candidate = Path(sys.executable).with_name("dpt-launch")
    if candidate.exists():
        return str(candidate)
    return shutil.which("dpt-launch") or "dpt-launch"


def client_files(client: str) -> Path | None:
    """Where a client keeps its MCP servers (None: it is configured by a command)."""
    home = Path.home()
    if client == "claude-desktop":
        if sys.platform == "darwin":
            return home / "Library/Application Support/Claude/claude_desktop_config.json"
        return home / ".config/Claude/claude_desktop_config.json"
    if client == "cursor":
        return home / ".cursor/mcp.json"
    if client == "vscode":
        return Path.cwd() / ".vscode/mcp.json"
    if client == "codex":
        return home / ".codex/config.toml"
    if client == "windsurf":
        return home / ".codeium/windsurf/mcp_config.json"
    return None


def snippet(
    client: str,
    name: str,
    config: Path | None,
    url: str | None = None,
    token_env: str | None = None,
    profile: str | None = None,
) -> str:
    """The client's entry: ``--config F``, or with *url* the ``connect URL`` form; with
    *profile*, ``--profile NAME`` (the tools as that client takes them, docs/clients.md).

    With *token_env*, clients that do not pass the shell's environment to the servers they
    start (GUI apps; codex passes only a few variables) get an ``env`` block holding the
    variable with a placeholder for the token. Claude Code runs from the shell and inherits it.
    """
    command, args = _launcher_path(), ["--config", str(config)]
    env: dict[str, str] = {}
    if url is not None:
        args = ["connect", url, *(["--token-env", token_env] if token_env else [])]
    if profile:
        args += ["--profile", profile]
        if token_env and client != "claude-code":
            env = {token_env: TOKEN_PLACEHOLDER}
    if client == "claude-code":
        return shlex.join(["claude", "mcp", "add", name, "--", command, *args])
    if client == "codex":
        quoted = ", ".join(json.dumps(a) for a in args)
        lines = f"[mcp_servers.{name}]\ncommand = {json.dumps(command)}\nargs = [{quoted}]\n"
        if env:
            pairs = ", ".join(f"{key} = {json.dumps(value)}" for key, value in env.items())
            lines += f"env = {{ {pairs} }}\n"
        return lines
    entry: dict[str, Any] = {"command": command, "args": args}
    if env:
        entry["env"] = env
    key = "mcpServers"
    if client == "vscode":
        entry = {"type": "stdio", **entry}
        key = "servers"
    return json.dumps({key: {name: entry}}, indent=2)


def write_client_config(
    client: str,
    name: str,
    config: Path | None,
    url: str | None = None,
    token_env: str | None = None,
    profile: str | None = None,
) -> Path:
    """Merge our entry into the client's file: a backup first, other entries untouched."""
    path = client_files(client)
    if path is None:
        raise ValueError(f"{client} is configured by a command: run the line printed above")
    # A dotfiles symlink stays a symlink: the file it points to gets the entry.
    path = Path(os.path.realpath(path))
    if path.exists() and not path.stat().st_mode & stat.S_IWUSR:
        raise ValueError(f"{path} is read-only; make it writable (chmod u+w) to add the entry")
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    if client == "codex":
        import tomllib

        try:
            servers = tomllib.loads(text).get("mcp_servers", {})
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"{path} is not valid TOML ({exc}); fix it first") from None
        if not isinstance(servers, dict):
            raise ValueError(f"{path}: 'mcp_servers' is not a table")
        if name in servers:
            raise ValueError(f"{path} already has mcp_servers.{name}; remove it first, or --name")
        updated = (text.rstrip("\n") + "\n\n" if text.strip() else "") + snippet(
            client, name, config, url, token_env, profile
        )
        tomllib.loads(updated)  # (a last check: what is written parses)
    else:
        try:
            data = json.loads(text) if text.strip() else {}
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path} is not valid JSON ({exc.msg}, line {exc.lineno})") from None
        if not isinstance(data, dict):
            raise ValueError(f"{path} does not hold a JSON object")
        ours = json.loads(snippet(client, name, config, url, token_env, profile))
        key = next(iter(ours))
        servers = data.setdefault(key, {})
        if not isinstance(servers, dict):
            raise ValueError(f"{path}: '{key}' is not an object")
        servers[name] = ours[key][name]
        updated = json.dumps(data, indent=2) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        stamp = time.strftime("%Y%m%d-%H%M%S")
        backup = path.with_name(f"{path.name}.bak-{stamp}")
        for number in range(2, 1000):  # two writes in one second keep both backups
            if not backup.exists():
                break
            backup = path.with_name(f"{path.name}.bak-{stamp}-{number}")
        shutil.copy2(path, backup)
    from ...containment import atomic_write_at

    mode = path.stat().st_mode & 0o777 if path.exists() else 0o600
    folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        atomic_write_at(folder, path.name, updated.encode("utf-8"), mode=mode)
    finally:
        os.close(folder)
    return path


def client_config(args: argparse.Namespace) -> int:
    config: Path | None = None
    if args.url is not None:
        if not args.url.startswith(("http://", "https://")):
            return _fail(f"--url {args.url!r}: give the daemon's http(s) URL", EXIT_USAGE)
    else:
        config = Path(args.config).expanduser().resolve()
        if not config.is_file():
            return _fail(
                f"{config}: no such config file (write one with: dpt-launch init)", EXIT_USAGE
            )
    if args.token_env and args.url is None:
        return _fail("--token-env goes with --url (the daemon's token)", EXIT_USAGE)
    if not CLIENT_ENTRY_NAME.match(args.name):
        return _fail(
            f"--name {args.name[:100]!r}: use letters, digits, '_' and '-' (clients key on it)",
            EXIT_USAGE,
        )
    profile = None if args.profile == "none" else (args.profile or args.client)
    if profile and not re.match(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,39}$", profile):
        return _fail(f"--profile {profile[:100]!r}: letters, digits, '_' and '-'", EXIT_USAGE)
    if profile and config is not None:
        problem = _profile_problem(config, profile)
        if problem:
            return _fail(problem, EXIT_USAGE)
    print(snippet(args.client, args.name, config, args.url, args.token_env, profile))
    if args.token_env and args.client != "claude-code":
        print(
            f"dpt-launch: note: {args.client} does not pass {args.token_env} from your shell to "
            f"the servers it starts: replace {TOKEN_PLACEHOLDER} in the env block with the "
            "daemon's token",
            file=sys.stderr,
        )
    if args.write:
        try:
            path = write_client_config(
                args.client, args.name, config, args.url, args.token_env, profile
            )
        except (ValueError, OSError) as exc:
            return _fail(str(exc), EXIT_FAILURE)
        print(f"wrote the '{args.name}' entry into {path}", file=sys.stderr)
    return EXIT_OK


def _profile_problem(config: Path, profile: str) -> str | None:
    """Why *config* cannot serve *profile* (an unknown name, a bad config), or None."""
    from ..compose.profiles import ProfileError, resolve

    try:
        resolve(load_config(config).config, profile)
    except (ConfigError, ProfileError) as exc:
        return str(exc)
    return None


# -- init ------------------------------------------------------------------------------

STARTER = """\
# dpt-launch config: the MCP servers mounted into one process.
# Check it:  dpt-launch --config {path} --check
# Reference: docs/launcher.md of doc-processing-std-tools
name: doc-processing-std-tools
transport: stdio            # or: {{type: http, host: 127.0.0.1, port: 8765, path: /mcp}}

servers:
  memory:
    server: memory-tools    # memory as plain files; see docs/servers/memory-tools.md
    settings: {{}}          # memory_dir: unset = ./agent_memory in the project the client
                            # runs in, else a per-user folder; a path set here is relative to this file

  filesystem:
    settings:
      # roots: the client's workspace roots when it sends them; set them here to pin them.
      read_only: false

  # popoto-memory:          # needs: pip install 'doc-processing-std-tools[popoto]'
  #   settings: {{backend: embedded}}

  # github:                 # any MCP server you already use, by command...
  #   command: npx
  #   args: [-y, "@modelcontextprotocol/server-github"]
  #   env: {{GITHUB_TOKEN: "${{GITHUB_TOKEN}}"}}
  #   namespace: gh
  # search:                 # ...or by URL
  #   url: https://mcp.example.com/mcp
  #   headers: {{Authorization: "Bearer ${{SEARCH_TOKEN}}"}}
"""


def init(args: argparse.Namespace) -> int:
    path = Path(args.path).expanduser()
    if path.exists():
        return _fail(f"{path} exists; pick another path or edit it", EXIT_USAGE)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(STARTER.format(path=path), encoding="utf-8")
    except OSError as exc:
        return _fail(f"cannot write {path}: {exc.strerror or exc}", EXIT_FAILURE)
    print(f"wrote {path}; check it with: dpt-launch --config {path} --check", file=sys.stderr)
    return EXIT_OK


def parse(verb: str, argv: list[str], default_config: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=f"dpt-launch {verb}")
    if verb in ("tools", "call", "client-config"):
        parser.add_argument("-c", "--config", default=default_config, help="the YAML config")
    if verb == "tools":
        parser.add_argument(
            "name", nargs="?", help="one tool: its parameters, annotations and an example call"
        )
        parser.add_argument(
            "--json",
            action="store_true",
            help="print JSON instead of a table (each tool with its inputSchema and outputSchema)",
        )
        parser.add_argument(
            "--budget",
            nargs="?",
            const="",
            metavar="PROFILE",
            help="estimated tokens of each tool's definition, per server and in total; with "
            "PROFILE (cursor, claude-code, ... or one of the config's) its limits and what it does",
        )
    elif verb == "call":
        parser.add_argument("tool", help="the tool's name, as `dpt-launch tools` lists it")
        parser.add_argument("arguments", nargs="?", help="its arguments as a JSON object")
    elif verb == "client-config":
        parser.add_argument("client", choices=CLIENTS)
        parser.add_argument("--name", default="dpt", help="the server's name in the client")
        parser.add_argument(
            "--url",
            help="a running daemon's URL: the snippet runs `dpt-launch connect URL` (no --config)",
        )
        parser.add_argument(
            "--token-env", metavar="VAR", help="with --url: the variable holding the daemon's token"
        )
        parser.add_argument(
            "--profile",
            metavar="NAME",
            help="the profile the client runs with (default: the client's own, e.g. cursor: at "
            "most 40 tools; 'none' for the whole list); docs/clients.md",
        )
        parser.add_argument(
            "--write",
            action="store_true",
            help="merge the entry into the client's config file (a backup is kept)",
        )
    elif verb == "init":
        parser.add_argument("path", nargs="?", default="tools.yaml")
    return parser.parse_args(argv)
