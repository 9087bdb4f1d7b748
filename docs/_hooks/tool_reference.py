"""MkDocs hook: the generated part of every tool page, from the servers' live schemas.

A tool page ``docs/tools/<tool>.md`` holds the hand-written explanation and examples
and one marker line, ``<!-- tool-reference: <server>/<tool> -->``, where this hook
puts what the server itself says about the tool: its parameter table (name, type,
required, default, description, from the input schema), its annotations (read-only,
destructive, idempotent, open world) and the description clients receive. A server
page holds ``<!-- tool-index: <server> -->``, replaced by a table of its tools
linking to their pages. The nav entry ``servers/<server>.md`` becomes a section:
the server page, then one page per tool in the order the server lists them.

The servers are built in-process (``create_server`` with throw-away settings; no
lifespan runs, so nothing starts) once per build. A server whose optional extra is
not installed (popoto-memory without ``popoto``) gets a note instead of its tables,
and its tool pages are found from their markers; the build still passes.
``tests/docs/test_docs_site.py`` imports this module to check the hand-written parts.
"""

from __future__ import annotations

import asyncio
import html
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# One reading of a schema for the site and for `dpt-launch tools NAME` (test_docs uses them here).
from doc_processing_std_tools.launcher.cli.tool_help import (  # noqa: F401
    parameter_rows,
    resolve,
    type_of,
)

DOCS = Path(__file__).resolve().parents[1]
TOOLS_DIR = "tools"

TOOL_MARKER = re.compile(r"^<!--\s*tool-reference:\s*([\w.-]+)/(\w+)\s*-->\s*$", re.M)
INDEX_MARKER = re.compile(r"^<!--\s*tool-index:\s*([\w.-]+)\s*-->\s*$", re.M)

# Settings that register every tool (filesystem's writing ones included) and touch
# nothing: each server is only built and listed, never started.
BUILD_SETTINGS: dict[str, Callable[[Path], dict[str, Any]]] = {
    "memory-tools": lambda tmp: {"memory_dir": str(tmp / "memory")},
    "filesystem": lambda tmp: {"roots": [str(tmp)], "read_only": False},
    "popoto-memory": lambda tmp: {"backend": "embedded", "data_dir": str(tmp / "popoto")},
}


@dataclass
class Tool:
    """What a server lists for one tool."""

    name: str
    server: str
    description: str
    schema: dict[str, Any]
    annotations: dict[str, Any]


@dataclass
class Catalog:
    """The live tools of every documented server, or why a server could not be listed."""

    tools: dict[str, list[Tool]] = field(default_factory=dict)  # server -> tools, listed order
    missing: dict[str, str] = field(default_factory=dict)  # server -> the fix (pip install ...)

    def find(self, name: str) -> Tool | None:
        return next((t for ts in self.tools.values() for t in ts if t.name == name), None)


# -- listing the live tools -----------------------------------------------------------


async def list_server(server: str, workdir: Path) -> list[Tool]:
    """Build *server* as the launcher does (registry, settings model, factory) and list it."""
    from doc_processing_std_tools.servers import resolve_registered

    source = resolve_registered(server)
    settings = source.validate_settings(BUILD_SETTINGS[server](workdir), workdir)
    built = source.build(settings)
    return [
        Tool(
            name=tool.name,
            server=server,
            description=tool.description or "",
            schema=tool.parameters,
            annotations=tool.annotations.model_dump() if tool.annotations else {},
        )
        for tool in await built.list_tools()
    ]


async def live_catalog() -> Catalog:
    """Every server of :data:`BUILD_SETTINGS`; one without its optional extra is noted."""
    from doc_processing_std_tools.servers import ServerLoadError

    catalog = Catalog()
    with tempfile.TemporaryDirectory(prefix="dpt-docs-") as tmp:
        for server in BUILD_SETTINGS:
            try:
                catalog.tools[server] = await list_server(server, Path(tmp))
            except ServerLoadError as exc:
                if exc.extra is None:
                    raise
                catalog.missing[server] = str(exc)
    return catalog


# -- rendering ----------------------------------------------------------------------


def escape(text: str) -> str:
    """Plain text (a schema description) safe in a Markdown table cell or paragraph."""
    text = html.escape(" ".join(text.split()), quote=False)
    return re.sub(r"([\\`*_\[\]|])", r"\\\1", text)


def hint(value: Any) -> str:
    return {True: "yes", False: "no"}.get(value, "not declared")


def render_tool(tool: Tool) -> str:
    """The generated block of a tool page: parameters, annotations, description."""
    lines = [f"Served by [{tool.server}](../servers/{tool.server}.md).", "", "## Parameters", ""]
    rows = parameter_rows(tool.schema)
    if rows:
        lines += ["| name | type | required | default | description |", "|---|---|---|---|---|"]
        for name, kind, required, default, description in rows:
            cells = [
                f"`{name}`",
                kind.replace("|", r"\|"),
                "yes" if required else "no",
                f"`{default}`".replace("|", r"\|") if default else "",
                escape(description),
            ]
            lines.append("| " + " | ".join(cells) + " |")
    else:
        lines.append("This tool takes no parameters.")
    notes = tool.annotations
    lines += [
        "",
        "## Annotations",
        "",
        "| read-only | destructive | idempotent | open world |",
        "|---|---|---|---|",
        f"| {hint(notes.get('read_only_hint'))} | {hint(notes.get('destructive_hint'))} "
        f"| {hint(notes.get('idempotent_hint'))} | {hint(notes.get('open_world_hint'))} |",
        "",
        "## Description sent to clients",
        "",
        *(f"> {escape(line)}" if line.strip() else ">" for line in tool.description.splitlines()),
    ]
    return "\n".join(lines)


def missing_note(server: str, fix: str) -> str:
    """What stands in for generated tables when the server cannot be built here."""
    return (
        f'!!! warning "Generated reference unavailable"\n'
        f"    This part of the page is generated from {server}'s live schema when the docs\n"
        f"    are built, and {server} could not be built here: {escape(fix)}.\n"
        f"    Install it and rebuild the docs to see the parameter table."
    )


def first_sentence(text: str) -> str:
    match = re.match(r"(.+?[.!?])(\s|$)", " ".join(text.split()))
    return match.group(1) if match else text.strip()


def render_index(server: str, tools: list[Tool]) -> str:
    """The table of a server page: one linked row per tool, with its hints."""
    lines = ["| tool | what it does | read-only | destructive |", "|---|---|---|---|"]
    for tool in tools:
        lines.append(
            f"| [`{tool.name}`](../{TOOLS_DIR}/{tool.name}.md) "
            f"| {escape(first_sentence(tool.description))} "
            f"| {hint(tool.annotations.get('read_only_hint'))} "
            f"| {hint(tool.annotations.get('destructive_hint'))} |"
        )
    return "\n".join(lines)


INDEX_PAGE = "index.md"  # docs/tools/index.md: every tool, by server, checked by tests/docs/test_docs_site.py
INDEX_INTRO = """\
# Tools

Every tool of the built-in servers, grouped by server, with the first sentence of the description
clients receive. Each name links to its page: parameters, annotations, an example and pitfalls.
From a terminal, `dpt-launch tools NAME --config F` shows the same parameters and an example call,
and `dpt-launch tools --config F --json` gives each tool's `inputSchema` and `outputSchema`.

This page is checked against the servers' live schemas by `tests/docs/test_docs_site.py`; after changing a
tool, rewrite it with `python docs/_hooks/tool_reference.py > docs/tools/index.md`.
"""


def summary_rows(tools: list[Tool]) -> list[str]:
    """One index row per tool: its linked name and the first sentence of its description."""
    return [
        f"| [`{tool.name}`]({tool.name}.md) | {escape(first_sentence(tool.description))} |"
        for tool in tools
    ]


def render_tools_index(catalog: Catalog) -> str:
    """The whole of docs/tools/index.md, from the live tools."""
    parts = [INDEX_INTRO]
    for server, tools in catalog.tools.items():
        parts += [
            f"## {server}\n",
            f"Served by [{server}](../servers/{server}.md).\n",
            "| tool | what it does |",
            "|---|---|",
            *summary_rows(tools),
            "",
        ]
    return "\n".join(parts)


# -- the pages -----------------------------------------------------------------------


def tool_pages(docs: Path = DOCS) -> dict[str, list[str]]:
    """server -> tool names, from the markers of ``docs/tools/*.md`` (file order)."""
    pages: dict[str, list[str]] = {}
    for path in sorted((docs / TOOLS_DIR).glob("*.md")):
        for server, name in TOOL_MARKER.findall(path.read_text(encoding="utf-8")):
            pages.setdefault(server, []).append(name)
    return pages


def tool_order(catalog: Catalog, docs: Path = DOCS) -> dict[str, list[str]]:
    """server -> its tool names: as the server lists them, else as the pages name them."""
    pages = tool_pages(docs)
    order = {server: [t.name for t in tools] for server, tools in catalog.tools.items()}
    for server in catalog.missing:
        order[server] = pages.get(server, [])
    return order


def expand_nav(nav: Any, order: dict[str, list[str]]) -> Any:
    """Each ``servers/<server>.md`` entry becomes a section: overview, then its tools."""
    if isinstance(nav, list):
        return [expand_nav(item, order) for item in nav]
    if isinstance(nav, dict):
        out = {}
        for title, value in nav.items():
            server = _server_page(value)
            if server in order:
                value = [{"Overview": value}] + [
                    {name: f"{TOOLS_DIR}/{name}.md"} for name in order[server]
                ]
            else:
                value = expand_nav(value, order)
            out[title] = value
        return out
    return nav


def _server_page(value: Any) -> str | None:
    if isinstance(value, str) and value.startswith("servers/") and value.endswith(".md"):
        return value.removeprefix("servers/").removesuffix(".md")
    return None


def fill_tool_page(markdown: str, catalog: Catalog, where: str) -> str:
    """Replace the page's tool-reference marker; a marker naming no live tool is an error."""
    markers = TOOL_MARKER.findall(markdown)
    if len(markers) != 1:
        raise ValueError(
            f"{where}: a tool page needs exactly one '<!-- tool-reference: server/tool -->' "
            f"line (found {len(markers)})"
        )
    server, name = markers[0]

    def block(_match: re.Match[str]) -> str:
        if server in catalog.missing:
            return f"Served by [{server}](../servers/{server}.md).\n\n" + missing_note(
                server, catalog.missing[server]
            )
        tool = catalog.find(name)
        if tool is None or tool.server != server:
            live = ", ".join(t.name for t in catalog.tools.get(server, []))
            raise ValueError(f"{where}: {server} serves no tool {name!r} (it serves: {live})")
        return render_tool(tool)

    return TOOL_MARKER.sub(block, markdown)


def fill_index(markdown: str, catalog: Catalog, where: str) -> str:
    def block(match: re.Match[str]) -> str:
        server = match.group(1)
        if server in catalog.missing:
            names = tool_pages().get(server, [])
            links = ", ".join(f"[`{n}`](../{TOOLS_DIR}/{n}.md)" for n in names)
            return f"Its tools: {links}.\n\n" + missing_note(server, catalog.missing[server])
        if server not in catalog.tools:
            raise ValueError(f"{where}: unknown server {server!r} in tool-index")
        return render_index(server, catalog.tools[server])

    return INDEX_MARKER.sub(block, markdown)


# -- the MkDocs hook events ---------------------------------------------------------

_catalog: Catalog | None = None


def on_config(config: Any) -> Any:
    global _catalog
    _catalog = asyncio.run(live_catalog())
    config["nav"] = expand_nav(config["nav"], tool_order(_catalog))
    return config


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    from mkdocs.exceptions import PluginError

    assert _catalog is not None
    where = f"docs/{page.file.src_uri}"
    try:
        if page.file.src_uri == f"{TOOLS_DIR}/{INDEX_PAGE}":
            return markdown
        if page.file.src_uri.startswith(f"{TOOLS_DIR}/"):
            return fill_tool_page(markdown, _catalog, where)
        return fill_index(markdown, _catalog, where)
    except ValueError as exc:
        raise PluginError(str(exc)) from None


if __name__ == "__main__":  # python docs/_hooks/tool_reference.py > docs/tools/index.md
    print(render_tools_index(asyncio.run(live_catalog())), end="")
