"""The docs site agrees with the code.

* Drift: every server page under ``docs/servers/`` has one ``### `tool``` section
  per live tool, each with a ``| name | type | required | default | description |``
  table listing exactly the tool's parameters (``required`` is ``yes`` iff the
  parameter is in the input schema's ``required``), and an example whose JSON
  arguments the schema accepts by name. The live tools come from the servers
  themselves (``create_server(...).list_tools()``), so a renamed parameter or a new
  tool fails here until its page is updated.
* Build: ``mkdocs build --strict`` passes (broken links, anchors and API references
  are errors).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

TABLE_HEADER = ["name", "type", "required", "default", "description"]
TOOL_HEADING = re.compile(r"^###\s+`([^`]+)`\s*$")
ANY_HEADING = re.compile(r"^#{1,3}\s")
FENCE = re.compile(r"^\s*(```+|~~~+)(.*)$")


# -- the live schemas -------------------------------------------------------------


async def _schemas(server: Any) -> dict[str, dict[str, Any]]:
    """name -> input schema of every tool the server lists (no lifespan is started)."""
    return {tool.name: tool.parameters for tool in await server.list_tools()}


async def live_memory_tools(tmp_path: Path) -> dict[str, dict[str, Any]]:
    from doc_processing_std_tools import memory

    return await _schemas(memory.create_server(memory.Settings(memory_dir=tmp_path / "mem")))


async def live_filesystem_tools(tmp_path: Path) -> dict[str, dict[str, Any]]:
    from doc_processing_std_tools import filesystem

    # read_only: false registers every tool, the writing ones included.
    settings = filesystem.Settings(roots=[tmp_path], read_only=False)
    return await _schemas(filesystem.create_server(settings))


async def live_popoto_tools(tmp_path: Path) -> dict[str, dict[str, Any]]:
    pytest.importorskip(
        "popoto.integrations.mcp_server", reason="the popoto extra is not installed"
    )
    from doc_processing_std_tools import popoto_memory

    # create_server only registers popoto's tool_definitions(); nothing connects or
    # starts until the lifespan runs, which list_tools() does not enter.
    settings = popoto_memory.Settings(backend="embedded", data_dir=tmp_path / "popoto")
    return await _schemas(popoto_memory.create_server(settings))


SERVERS = {
    "memory-tools": ("servers/memory-tools.md", live_memory_tools),
    "filesystem": ("servers/filesystem.md", live_filesystem_tools),
    "popoto-memory": ("servers/popoto-memory.md", live_popoto_tools),
}


# -- parsing a server page ------------------------------------------------------


@dataclass
class Section:
    """One ``### `tool``` section of a page."""

    name: str
    line: int  # 1-based line of the heading
    lines: list[tuple[int, str]] = field(default_factory=list)  # (line number, text)


def split_cells(row: str) -> list[str]:
    """The cells of a Markdown table row (``\\|`` is a literal pipe)."""
    body = row.strip()
    body = body.removeprefix("|")
    if body.endswith("|") and not body.endswith("\\|"):
        body = body[:-1]
    return [cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", body)]


def tool_sections(text: str) -> list[Section]:
    """Every ``### `name``` section, up to the next heading of level 1-3 (fences skipped)."""
    sections: list[Section] = []
    current: Section | None = None
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        match = FENCE.match(line)
        if fence is None and match:
            fence = match.group(1)[0] * 3
        elif fence is not None and line.strip().startswith(fence):
            fence = None
            if current is not None:
                current.lines.append((number, line))
            continue
        if fence is None and ANY_HEADING.match(line):
            heading = TOOL_HEADING.match(line)
            current = Section(heading.group(1), number) if heading else None
            if current is not None:
                sections.append(current)
            continue
        if current is not None:
            current.lines.append((number, line))
    return sections


@dataclass
class Row:
    name: str
    required: str
    line: int


def parameter_table(section: Section) -> tuple[list[Row] | None, list[str]]:
    """The rows of the section's parameter table (None when it has none), plus format problems."""
    problems: list[str] = []
    lines = section.lines
    outside_fence = _outside_fences(lines)
    for index, (_number, line) in enumerate(lines):
        if not outside_fence[index] or not line.lstrip().startswith("|"):
            continue
        header = [cell.lower() for cell in split_cells(line)]
        if header != TABLE_HEADER:
            continue
        rows: list[Row] = []
        for row_number, row_line in lines[index + 2 :]:
            if not row_line.lstrip().startswith("|"):
                break
            cells = split_cells(row_line)
            if len(cells) != len(TABLE_HEADER):
                problems.append(
                    f"line {row_number}: the row has {len(cells)} cells, the table needs "
                    f"{len(TABLE_HEADER)} ({' | '.join(TABLE_HEADER)})"
                )
                continue
            rows.append(Row(cells[0].strip("` "), cells[2].strip("` *").lower(), row_number))
        return rows, problems
    return None, problems


def _outside_fences(lines: list[tuple[int, str]]) -> list[bool]:
    flags: list[bool] = []
    fence: str | None = None
    for _number, line in lines:
        match = FENCE.match(line)
        if fence is None and match:
            fence = match.group(1)[0] * 3
            flags.append(False)
        elif fence is not None:
            if line.strip().startswith(fence):
                fence = None
            flags.append(False)
        else:
            flags.append(True)
    return flags


def example_arguments(section: Section) -> tuple[Any, int] | None:
    """The first ```json block of the section, parsed, with its line; None if there is none."""
    lines = section.lines
    for index, (number, line) in enumerate(lines):
        match = FENCE.match(line)
        if not match or match.group(2).strip().lower() != "json":
            continue
        body = []
        for _n, inner in lines[index + 1 :]:
            if inner.strip().startswith(match.group(1)[:3]):
                break
            body.append(inner)
        try:
            return json.loads("\n".join(body)), number
        except ValueError as exc:
            return ("invalid", str(exc)), number
    return None


# -- comparing ------------------------------------------------------------------


def schema_params(schema: dict[str, Any]) -> tuple[list[str], set[str]]:
    return list((schema.get("properties") or {}).keys()), set(schema.get("required") or [])


def type_hint(prop: dict[str, Any]) -> str:
    kind = prop.get("type")
    if kind is None and "anyOf" in prop:
        kinds = [p.get("type") for p in prop["anyOf"] if p.get("type") != "null"]
        kind = kinds[0] if kinds else None
    return str(kind or "?")


def drift(page: str, text: str, live: dict[str, dict[str, Any]]) -> list[str]:
    """Everything to add to, change in or remove from *page* so it matches *live*."""
    problems: list[str] = []
    sections = tool_sections(text)
    documented: dict[str, Section] = {}
    for section in sections:
        if section.name in documented:
            problems.append(
                f"{page}:{section.line}: remove the second '### `{section.name}`' section "
                f"(the first is at line {documented[section.name].line})"
            )
            continue
        documented[section.name] = section

    for name in live:
        if name not in documented:
            params, required = schema_params(live[name])
            rows = ", ".join(f"{p} ({'yes' if p in required else 'no'})" for p in params)
            problems.append(
                f"{page}: add a section '### `{name}`' for the live tool {name!r}"
                + (f", with table rows for: {rows}" if rows else " (it takes no parameters)")
            )
    for name, section in documented.items():
        if name not in live:
            problems.append(
                f"{page}:{section.line}: remove the section '### `{name}`': no such tool is "
                f"served (live tools: {', '.join(sorted(live))})"
            )

    for name, section in documented.items():
        if name not in live:
            continue
        problems.extend(_section_drift(page, section, live[name]))
    return problems


def _section_drift(page: str, section: Section, schema: dict[str, Any]) -> list[str]:
    name = section.name
    where = f"{page}:{section.line} (### `{name}`)"
    params, required = schema_params(schema)
    properties = schema.get("properties") or {}
    rows, problems = parameter_table(section)
    problems = [f"{page}: {p}" for p in problems]
    if rows is None:
        if params:
            listed = ", ".join(f"{p} ({'yes' if p in required else 'no'})" for p in params)
            problems.append(
                f"{where}: add a parameter table '| {' | '.join(TABLE_HEADER)} |' with one row "
                f"per parameter: {listed}"
            )
        rows = []
    seen: dict[str, Row] = {}
    for row in rows:
        if row.name in seen:
            problems.append(
                f"{page}:{row.line}: remove the duplicate row for parameter {row.name!r}"
            )
            continue
        seen[row.name] = row
        if row.name not in properties:
            problems.append(
                f"{page}:{row.line}: remove the row for parameter {row.name!r} of {name}: the live "
                f"schema has no such parameter (it has: {', '.join(params) or 'none'})"
            )
            continue
        want = "yes" if row.name in required else "no"
        if row.required not in ("yes", "no"):
            problems.append(
                f"{page}:{row.line}: the required column of {name}.{row.name} must be 'yes' or "
                f"'no', not {row.required!r}; write {want!r}"
            )
        elif row.required != want:
            problems.append(
                f"{page}:{row.line}: change the required column of {name}.{row.name} from "
                f"{row.required!r} to {want!r} (the live schema "
                f"{'requires' if want == 'yes' else 'does not require'} it)"
            )
    for param in params:
        if param not in seen:
            want = "yes" if param in required else "no"
            problems.append(
                f"{where}: add the table row '| `{param}` | {type_hint(properties[param])} | "
                f"{want} | ... | ... |' for parameter {param!r}"
            )

    example = example_arguments(section)
    if example is None:
        problems.append(f"{where}: add an example call: a ```json block with the arguments")
    else:
        arguments, line = example
        if isinstance(arguments, tuple):
            problems.append(
                f"{page}:{line}: the example of {name} is not valid JSON: {arguments[1]}"
            )
        elif not isinstance(arguments, dict):
            problems.append(f"{page}:{line}: the example of {name} must be a JSON object")
        else:
            for key in arguments:
                if key not in properties:
                    problems.append(
                        f"{page}:{line}: remove {key!r} from the example of {name}: the live "
                        "schema has no such parameter"
                    )
            for key in sorted(required - set(arguments)):
                problems.append(
                    f"{page}:{line}: add the required argument {key!r} to the example of {name}"
                )
    return problems


# -- the tests ------------------------------------------------------------------


@pytest.mark.parametrize("server", sorted(SERVERS))
async def test_server_page_matches_the_live_tools(server: str, tmp_path: Path) -> None:
    page, live_tools = SERVERS[server]
    live = await live_tools(tmp_path)
    assert live, f"{server} lists no tools"
    text = (DOCS / page).read_text(encoding="utf-8")
    problems = drift(f"docs/{page}", text, live)
    if problems:
        pytest.fail(
            f"docs/{page} is out of date with the live {server} tools:\n"
            + "\n".join(f"  - {p}" for p in problems),
            pytrace=False,
        )


def test_drift_check_catches_each_kind_of_drift() -> None:
    """The checker itself: a page with one of each mistake gets one message for each."""
    live = {
        "alpha": {
            "type": "object",
            "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
            "required": ["a"],
        },
        "beta": {"type": "object", "properties": {}},
    }
    page = """\
# demo

```bash
### `not_a_tool` (inside a fence: ignored)
```

### `alpha`

| name | type | required | default | description |
|---|---|---|---|---|
| `a` | string | no | | wrong required flag |
| `old` | string | no | | stale |

```json
{"a": "x", "gone": 1}
```

### `gamma`

No such tool.
"""
    problems = "\n".join(drift("page.md", page, live))
    assert "add a section '### `beta`'" in problems
    assert "remove the section '### `gamma`'" in problems
    assert "change the required column of alpha.a from 'no' to 'yes'" in problems
    assert "remove the row for parameter 'old'" in problems
    assert "add the table row '| `b` | integer | no | ... | ... |'" in problems
    assert "remove 'gone' from the example of alpha" in problems
    assert "not_a_tool" not in problems

    fixed = """\
### `alpha`

| name | type | required | default | description |
|---|---|---|---|---|
| `a` | string | yes | | text, with a \\| pipe |
| `b` | integer | no | `0` | count |

```json
{"a": "x"}
```

### `beta`

This tool takes no parameters.

```json
{}
```
"""
    assert drift("page.md", fixed, live) == []


def test_popoto_page_matches_popotos_own_definitions() -> None:
    """popoto-memory serves tool_definitions() unchanged; the page follows popoto, too."""
    pytest.importorskip(
        "popoto.integrations.mcp_server", reason="the popoto extra is not installed"
    )
    from popoto.integrations.mcp_server import tool_definitions

    live = {d["name"]: d["inputSchema"] for d in tool_definitions()}
    page = "docs/servers/popoto-memory.md"
    problems = drift(page, (ROOT / page).read_text(encoding="utf-8"), live)
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


def test_mkdocs_build_strict(tmp_path: Path) -> None:
    for module in ("mkdocs", "material", "mkdocstrings_handlers.python"):
        if importlib.util.find_spec(module.split(".")[0]) is None:
            pytest.skip(f"{module} is not installed (pip install -e '.[docs]')")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, (
        "mkdocs build --strict failed:\n" + result.stdout[-4000:] + result.stderr[-4000:]
    )
    assert (tmp_path / "site" / "servers" / "memory-tools" / "index.html").exists()
