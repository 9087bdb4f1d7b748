"""``dpt-launch client-config``: the entry an MCP client needs to start (or ``connect`` to) the
launcher, printed, or with ``--write`` merged into the client's own file."""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import stat
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...containment import atomic_write_at
from ..config.schema import BUILTIN_PROFILE_NAMES, ConfigError, load_config, missing_config
from ..errors import LauncherError
from .status import EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from .status import fail as _fail

CLIENTS = BUILTIN_PROFILE_NAMES  # (a client-config for each built-in profile's client)
CLIENT_ENTRY_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # a bare TOML key, a JSON key
TOKEN_PLACEHOLDER = "PASTE-THE-DAEMON-TOKEN-HERE"  # the daemon token's stand-in, in the env block


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


class EntryTaken(LauncherError):
    """The client's file already has a different entry under our name (``--force`` replaces it)."""


@dataclass
class Written:
    """Where ``--write`` put the entry, what it replaced (a summary) and the backup it kept."""

    path: Path
    replaced: str | None = None
    backup: Path | None = None
    unchanged: bool = False


def describe_entry(entry: Any) -> str:
    """One short line for a client entry: the command it runs, or the URL it connects to."""
    if isinstance(entry, dict):
        if isinstance(entry.get("command"), str):
            args = entry.get("args")
            words = [entry["command"], *(str(a) for a in args)] if isinstance(args, list) else []
            text = shlex.join(words) if words else entry["command"]
        elif isinstance(entry.get("url"), str):
            text = f"url {entry['url']}"
        else:
            text = json.dumps(entry, sort_keys=True, default=str)
    else:
        text = repr(entry)
    return text if len(text) <= 160 else text[:157] + "..."


# A TOML table header for mcp_servers.NAME or one of its sub-tables, in any spelling
# ([mcp_servers.dpt], [ mcp_servers . "dpt" ], [mcp_servers.dpt.env]).
def _table_header(name: str) -> re.Pattern[str]:
    key = rf"(?:{re.escape(name)}|\"{re.escape(name)}\"|'{re.escape(name)}')"
    return re.compile(rf"^\s*\[\s*(?:mcp_servers|\"mcp_servers\")\s*\.\s*{key}\s*(?:\.[^\]]*)?\]")


def _without_toml_entry(text: str, name: str) -> str:
    """*text* without the ``[mcp_servers.NAME]`` table and its sub-tables."""
    header = _table_header(name)
    kept: list[str] = []
    skipping = False
    for line in text.splitlines(keepends=True):
        if line.lstrip().startswith("["):
            skipping = bool(header.match(line))
        if not skipping:
            kept.append(line)
    return "".join(kept)


def write_client_config(
    client: str,
    name: str,
    config: Path | None,
    url: str | None = None,
    token_env: str | None = None,
    profile: str | None = None,
    force: bool = False,
) -> Written:
    """Merge our entry into the client's file: a backup first, other entries untouched.

    A different entry under *name* is replaced only with *force* (else :class:`EntryTaken`);
    the same entry leaves the file as it is.
    """
    path = client_files(client)
    if path is None:
        raise ValueError(f"{client} is configured by a command: run the line printed above")
    # A dotfiles symlink stays a symlink: the file it points to gets the entry.
    path = Path(os.path.realpath(path))
    if path.exists() and not path.stat().st_mode & stat.S_IWUSR:
        raise ValueError(f"{path} is read-only; make it writable (chmod u+w) to add the entry")
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    ours_text = snippet(client, name, config, url, token_env, profile)
    replaced: str | None = None
    if client == "codex":
        try:
            servers = tomllib.loads(text).get("mcp_servers", {})
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"{path} is not valid TOML ({exc}); fix it first") from None
        if not isinstance(servers, dict):
            raise ValueError(f"{path}: 'mcp_servers' is not a table")
        ours = tomllib.loads(ours_text)["mcp_servers"][name]
        if name in servers:
            if servers[name] == ours:
                return Written(path, unchanged=True)
            replaced = describe_entry(servers[name])
            if not force:
                raise EntryTaken(_taken(path, f"mcp_servers.{name}", replaced))
            text = _without_toml_entry(text, name)
            if name in tomllib.loads(text).get("mcp_servers", {}):
                raise ValueError(
                    f"{path} has mcp_servers.{name} inline, which --force cannot replace; "
                    "remove it by hand, or --name another"
                )
        updated = (text.rstrip("\n") + "\n\n" if text.strip() else "") + ours_text
        tomllib.loads(updated)  # (a last check: what is written parses)
    else:
        try:
            data = json.loads(text) if text.strip() else {}
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path} is not valid JSON ({exc.msg}, line {exc.lineno})") from None
        if not isinstance(data, dict):
            raise ValueError(f"{path} does not hold a JSON object")
        parsed = json.loads(ours_text)
        key = next(iter(parsed))
        servers = data.setdefault(key, {})
        if not isinstance(servers, dict):
            raise ValueError(f"{path}: '{key}' is not an object")
        if name in servers:
            if servers[name] == parsed[key][name]:
                return Written(path, unchanged=True)
            replaced = describe_entry(servers[name])
            if not force:
                raise EntryTaken(_taken(path, f"{key}.{name}", replaced))
        servers[name] = parsed[key][name]
        updated = json.dumps(data, indent=2) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    backup = None
    if path.exists():
        stamp = time.strftime("%Y%m%d-%H%M%S")
        backup = path.with_name(f"{path.name}.bak-{stamp}")
        for number in range(2, 1000):  # two writes in one second keep both backups
            if not backup.exists():
                break
            backup = path.with_name(f"{path.name}.bak-{stamp}-{number}")
        shutil.copy2(path, backup)
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o600
    folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        atomic_write_at(folder, path.name, updated.encode("utf-8"), mode=mode)
    finally:
        os.close(folder)
    return Written(path, replaced, backup)


def _taken(path: Path, where: str, replaced: str) -> str:
    return (
        f"{path} already has a different {where} ({replaced}); pass --force to replace it "
        "(a backup is kept), or --name another"
    )


def client_config(args: argparse.Namespace) -> int:
    config: Path | None = None
    if args.url is not None:
        if args.config is not None:  # (the daemon serves its own config: this one is not read)
            return _fail(
                "--config and --url do not go together: --url's entry connects to the daemon, "
                "which serves its own config; drop one",
                EXIT_USAGE,
            )
        if not args.url.startswith(("http://", "https://")):
            return _fail(f"--url {args.url!r}: give the daemon's http(s) URL", EXIT_USAGE)
    else:
        config = Path(args.config or args.default_config).expanduser().resolve()
        if not config.exists():
            return _fail(missing_config(config), EXIT_USAGE)
        if not config.is_file():
            return _fail(f"{config}: not a file; pass --config with the path of yours", EXIT_USAGE)
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
            written = write_client_config(
                args.client, args.name, config, args.url, args.token_env, profile, args.force
            )
        except EntryTaken as exc:
            return _fail(str(exc), EXIT_USAGE)
        except (ValueError, OSError) as exc:
            return _fail(str(exc), EXIT_FAILURE)
        if written.unchanged:
            print(f"{written.path} already has this '{args.name}' entry", file=sys.stderr)
        elif written.replaced is not None:
            print(
                f"replaced the '{args.name}' entry in {written.path} (it ran: {written.replaced}; "
                f"the old file is kept as {written.backup})",
                file=sys.stderr,
            )
        else:
            print(f"wrote the '{args.name}' entry into {written.path}", file=sys.stderr)
    return EXIT_OK


def _profile_problem(config: Path, profile: str) -> str | None:
    """Why *config* cannot serve *profile* (an unknown name, a bad config), or None."""
    # Imported here: compose brings fastmcp, ~0.8 s (python -X importtime), which
    # `client-config --url` and the argument checks before this need none of.
    from ..compose.profiles import ProfileError, resolve

    try:
        resolve(load_config(config).config, profile)
    except (ConfigError, ProfileError) as exc:
        return str(exc)
    return None


def parse(argv: list[str], default_config: str) -> argparse.Namespace:
    """The arguments of ``client-config``."""
    parser = argparse.ArgumentParser(prog="dpt-launch client-config")
    parser.add_argument(
        "-c", "--config", help=f"the YAML config (default: {default_config}; not with --url)"
    )
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
    parser.add_argument(
        "--force",
        action="store_true",
        help="with --write: replace a different entry of the same name (it says what it replaced)",
    )
    return parser.parse_args(argv, argparse.Namespace(default_config=default_config))
