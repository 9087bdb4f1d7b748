"""``dpt-launch tools`` and ``dpt-launch call``: the composed tools, listed or called once,
without serving.

Each verb is a function taking its parsed arguments and returning an exit status.
Results go to stdout (nothing is served, so stdout is free); errors go to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import json
import logging
import shlex
import sys
from pathlib import Path
from typing import Any

from fastmcp import Client
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..calls.pins import shown as shown_hidden
from ..compose import CompositionError, ServerStartError, compose
from ..compose.profile_names import plain_names, plain_problems
from ..compose.profiles import ProfileError, resolve
from ..config.schema import ConfigError, LoadedConfig, ServerEntry, load_config
from .budget import budget, print_budget
from .status import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, table_width
from .status import fail as _fail
from .tool_help import example_arguments, parameter_rows


async def composed(
    config: str | LoadedConfig, only: set[str] | None = None, pins: Any = None
) -> Any:
    """The composition of *config* (of the servers in *only*; judged by the ``PinGate`` *pins*,
    default the config's), or the exit status after printing why there is none."""
    try:
        loaded = config if isinstance(config, LoadedConfig) else load_config(config)
        with contextlib.redirect_stdout(sys.stderr):
            composition = await compose(loaded, only=only, pins=pins, one_shot=True)
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


async def _owner_composition(config: str, tool: str) -> tuple[Any, set[str], list[tuple[str, str]]]:
    """A composition holding *tool*'s server, started as little as possible, every tool name
    seen on the way (for a typo's suggestion), and the servers on the way that serve nothing
    (with why: the tool may be theirs).

    In-process servers are built first: that is cheap and starts nothing. Only when none of
    them has the tool are external servers started, and only those whose namespace and
    ``tools:`` globs admit the name (an npx server can take seconds to start).
    """
    try:
        loaded = load_config(config)
    except ConfigError as exc:
        return _fail(str(exc), EXIT_USAGE), set(), []
    enabled = {name: e for name, e in loaded.config.servers.items() if e.enabled}
    in_process = {name for name, e in enabled.items() if not e.external}
    candidates = {name for name, e in enabled.items() if e.external and could_expose(e, tool)}
    seen: set[str] = set()
    down: list[tuple[str, str]] = []
    for only in (in_process, candidates):
        if not only:
            continue
        composition = await composed(loaded, only)
        if isinstance(composition, int):
            return composition, seen, down
        names = {row["name"] for row in _tool_rows(composition)}
        if tool in names:
            return composition, seen, down
        seen |= names
        down += composition.not_serving()
        await composition.aclose()
    return None, seen, down


def shown_names(composition: Any) -> dict[str, str]:
    """Each exposed tool's name as a client naming no profile sees it (compose/profile_names.py)."""
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
                    # (hidden characters made visible: docs/trust.md)
                    "description": " ".join(shown_hidden(tool.description or "").split()),
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


def _no_such_tool(name: str, known: set[str], down: list[tuple[str, str]]) -> int:
    if down:  # (the tool may be one of theirs: say why they serve nothing)
        why = "; ".join(f"servers.{server} serves nothing: {reason}" for server, reason in down)
        return _fail(f"no tool {name!r} is served now: {why}", EXIT_FAILURE)
    close = difflib.get_close_matches(name, sorted(known), n=3, cutoff=0.8)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return _fail(f"no tool {name!r}{hint} (see: dpt-launch tools)", EXIT_USAGE)


def _say_not_serving(composition: Any) -> None:
    """One stderr line per server that serves nothing now, with why (as ``--check`` says)."""
    for server, why in composition.not_serving():
        print(f"dpt-launch: servers.{server} serves nothing: {why}", file=sys.stderr)


async def tools(args: argparse.Namespace) -> int:
    """The composed tool table, or with NAME one tool's parameters, without serving."""
    if args.budget is not None:
        return await _budget(args)
    if args.name:
        composition, known, down = await _owner_composition(args.config, args.name)
        if composition is None:
            return _no_such_tool(args.name, known, down)
    else:
        composition = await composed(args.config)
    if isinstance(composition, int):
        return composition
    try:
        rows = _tool_rows(composition)
        if not args.name:
            _say_not_serving(composition)
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
        Console(highlight=False, width=table_width()).print(table)
        # (nothing to list because no server serves: a failure, with its reasons said above)
        return EXIT_FAILURE if not rows and composition.not_serving() else EXIT_OK
    finally:
        await composition.aclose()


async def _budget(args: argparse.Namespace) -> int:
    """``tools --budget [PROFILE]``: estimated tokens per tool and server, the profile's limits."""
    composition = await composed(args.config)
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
    console = Console(highlight=False, width=table_width())
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
            table.add_row(*(escape(" ".join(shown_hidden(cell).split())) for cell in cells))
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
    try:
        arguments = json.loads(args.arguments) if args.arguments else {}
    except json.JSONDecodeError as exc:
        return _fail(f"the arguments are not JSON: {exc.msg} at character {exc.pos}", EXIT_USAGE)
    if not isinstance(arguments, dict):
        return _fail('the arguments must be a JSON object, e.g. \'{"key": "value"}\'', EXIT_USAGE)
    composition, known, down = await _owner_composition(args.config, args.tool)
    if isinstance(composition, int):
        return composition
    if composition is None:
        return _no_such_tool(args.tool, known, down)
    try:
        logging.getLogger("fastmcp").setLevel(logging.CRITICAL)  # the result says it once
        exposed = {shown: name for name, shown in shown_names(composition).items()}[args.tool]
        with contextlib.redirect_stdout(sys.stderr):
            async with Client(composition.root) as client:
                result = await client.call_tool(exposed, arguments, raise_on_error=False)
        print(printed(result), file=sys.stderr if result.is_error else sys.stdout)
        return EXIT_FAILURE if result.is_error else EXIT_OK
    finally:
        await composition.aclose()


def printed(result: Any) -> str:
    """What ``call`` prints of a tool's result: its text content, as a client shows it.

    The structured content, indented, only where it says the same as the text (an in-process
    tool's dict, whose text is that dict as compact JSON) or where there is no text; an
    external tool's text (which may say more than its ``structuredContent``) is never
    replaced by it.
    """
    text = "\n".join(getattr(block, "text", "") for block in result.content)
    structured = result.structured_content
    if structured is None or result.is_error:
        return text
    if text.strip():
        try:
            same = json.loads(text) == structured
        except ValueError:
            same = False
        if not same:
            return text
    return json.dumps(structured, indent=2, ensure_ascii=False)


def parse(verb: str, argv: list[str], default_config: str) -> argparse.Namespace:
    """The arguments of ``tools`` or ``call`` (*verb*)."""
    parser = argparse.ArgumentParser(prog=f"dpt-launch {verb}")
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
    return parser.parse_args(argv)
