"""The docs site agrees with the code.

Each tool has a page ``docs/tools/<tool>.md``. Its parameter table, annotations and
client-facing description are generated at build time from the live schema by the
MkDocs hook ``docs/_hooks/tool_reference.py``, so they cannot drift; these tests check
the rest:

* the hand-written parts: every live tool has a page, every page names a live tool of
  the right server, the code-like names the prose mentions in backticks exist (a
  parameter of the tool, a setting of its server, a tool, or a listed non-parameter),
  and the example is a JSON object the live schema accepts;
* the generator: it renders every live tool's parameters and hints as the schema says;
* the build: ``mkdocs build --strict`` passes (broken links, anchors and API
  references are errors), and still passes, with a note, when popoto is not installed.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from helpers.paths import REPO

ROOT = REPO
DOCS = ROOT / "docs"
TOOL_PAGES = sorted(p for p in (DOCS / "tools").glob("*.md") if p.name != "index.md")
TOOLS_INDEX = DOCS / "tools" / "index.md"

FENCE = re.compile(r"^\s*(```+|~~~+)(.*)$")
# A backticked code-like name: snake_case or camelCase, alone or as `name: value`/`name=value`.
CODE_NAME = re.compile(r"^([a-z][a-z0-9]*(?:_[a-z0-9]+)+|[a-z]+(?:[A-Z][a-z0-9]*)+)\s*(?:[:=].*)?$")
# Code-like names the tool pages use that are not parameters (values, result fields).
NOT_PARAMETERS = {
    "a_b": "a flattened memory key",
    "project_a": "a memory key",
    "isDirectory": "a get_file_info result line",
    "isFile": "a get_file_info result line",
    "isError": "the MCP result flag",
}


def load_generator() -> ModuleType:
    """The MkDocs hook as a module (it lives under docs/, outside the package)."""
    path = DOCS / "_hooks" / "tool_reference.py"
    spec = importlib.util.spec_from_file_location("tool_reference", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


gen = load_generator()


@pytest.fixture(scope="module")
def catalog() -> Any:
    """The live tools of every server, built in-process (no lifespan runs)."""
    return asyncio.run(gen.live_catalog())


def settings_names(server: str) -> set[str]:
    from doc_processing_std_tools.servers import resolve_registered

    model = resolve_registered(server).settings
    return set(model.model_fields) if model is not None else set()


# -- checking a tool page's hand-written parts ---------------------------------------


def prose(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line outside fenced code blocks."""
    lines: list[tuple[int, str]] = []
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        match = FENCE.match(line)
        if fence is None and match:
            fence = match.group(1)[0] * 3
        elif fence is not None:
            if line.strip().startswith(fence):
                fence = None
        else:
            lines.append((number, line))
    return lines


def example(text: str) -> tuple[int, str] | None:
    """(line, body) of the first ```json block after the '## Example' heading."""
    lines = text.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == "## Example")
    except StopIteration:
        return None
    for index in range(start + 1, len(lines)):
        match = FENCE.match(lines[index])
        if lines[index].startswith("## "):
            return None
        if match and match.group(2).strip().lower() == "json":
            body = []
            for inner in lines[index + 1 :]:
                if inner.strip().startswith(match.group(1)[:3]):
                    break
                body.append(inner)
            return index + 1, "\n".join(body)
    return None


def page_problems(
    page: str, text: str, tool: Any, known: set[str], schema: dict[str, Any] | None
) -> list[str]:
    """Everything to fix in the hand-written parts of a tool page.

    *tool* is the live tool the page documents (None when its server cannot be built
    here: then only the marker and the example's syntax are checked); *known* holds the
    other names the prose may mention (settings of its server, every tool).
    """
    problems: list[str] = []
    stem = Path(page).stem
    markers = gen.TOOL_MARKER.findall(text)
    if len(markers) != 1:
        problems.append(
            f"{page}: add exactly one line '<!-- tool-reference: <server>/{stem} -->' where the "
            f"generated parameter table goes (found {len(markers)})"
        )
    elif markers[0][1] != stem:
        problems.append(
            f"{page}: the marker names {markers[0][1]!r}; a page documents the tool of its file "
            f"name: write '<!-- tool-reference: {markers[0][0]}/{stem} -->' or rename the page"
        )
    elif tool is not None and markers[0][0] != tool.server:
        problems.append(
            f"{page}: {stem} is served by {tool.server}, not {markers[0][0]}: write "
            f"'<!-- tool-reference: {tool.server}/{stem} -->'"
        )

    if schema is not None:
        params = {row[0] for row in gen.parameter_rows(schema)}
        params |= {re.split(r"[.\[\]]+", p)[-1] for p in params}
        for number, line in prose(text):
            for token in re.findall(r"`([^`\n]+)`", line):
                match = CODE_NAME.match(token.strip())
                if not match:
                    continue
                name = match.group(1)
                if name in params or name in known or name in NOT_PARAMETERS:
                    continue
                problems.append(
                    f"{page}:{number}: `{name}` is not a parameter of {stem} (it has: "
                    f"{', '.join(sorted(params)) or 'none'}); fix the prose, or add it to "
                    "NOT_PARAMETERS in tests/docs/test_docs_site.py if it is not meant as one"
                )

    found = example(text)
    if found is None:
        problems.append(f"{page}: add a '## Example' section with a ```json block: the arguments")
        return problems
    line, body = found
    try:
        arguments = json.loads(body)
    except ValueError as exc:
        return [*problems, f"{page}:{line}: the example is not valid JSON: {exc}"]
    if not isinstance(arguments, dict):
        return [*problems, f"{page}:{line}: the example must be a JSON object of arguments"]
    if schema is not None:
        import jsonschema

        properties = schema.get("properties") or {}
        for key in arguments:
            if key not in properties:
                problems.append(
                    f"{page}:{line}: remove {key!r} from the example: {stem} has no such "
                    f"parameter (it has: {', '.join(properties) or 'none'})"
                )
        for error in jsonschema.Draft202012Validator(schema).iter_errors(arguments):
            where = "/".join(str(p) for p in error.absolute_path) or "the arguments"
            problems.append(f"{page}:{line}: the example's {where}: {error.message}")
    return problems


# -- the tests ------------------------------------------------------------------


def test_every_live_tool_has_one_page_and_every_page_a_live_tool(catalog: Any) -> None:
    pages = {path.stem for path in TOOL_PAGES}
    problems = []
    owners: dict[str, list[str]] = {}
    for server, tools in catalog.tools.items():
        for tool in tools:
            owners.setdefault(tool.name, []).append(server)
            if tool.name not in pages:
                problems.append(
                    f"add docs/tools/{tool.name}.md for {server}'s tool {tool.name!r}, with the "
                    f"line '<!-- tool-reference: {server}/{tool.name} -->' and an example"
                )
    for name, servers in owners.items():
        if len(servers) > 1:
            problems.append(
                f"{name} is served by {' and '.join(servers)}: one page cannot hold both"
            )
    for server, names in gen.tool_pages().items():
        if server in catalog.missing:
            continue  # cannot be listed here; its pages are checked where it can
        for name in names:
            if server not in catalog.tools:
                problems.append(f"docs/tools/{name}.md: no server named {server!r}")
            elif name not in owners:
                problems.append(
                    f"docs/tools/{name}.md: {server} serves no tool {name!r}: remove the page "
                    f"or rename it (live tools: {', '.join(t.name for t in catalog.tools[server])})"
                )
    assert not problems, "\n".join(problems)
    assert set(catalog.tools) >= {"memory-tools", "filesystem"}


def index_problems(text: str, catalog: Any) -> list[str]:
    """What docs/tools/index.md gets wrong: a live tool missing from its server's section, a
    summary that is not the first sentence of the live description, a tool that is gone."""
    sections: dict[str, list[str]] = {}
    server = None
    for line in text.splitlines():
        if line.startswith("## "):
            server = line[3:].strip()
            sections[server] = []
        elif server is not None and line.startswith("| [`"):
            sections[server].append(line)
    problems = []
    for name, tools in catalog.tools.items():
        expected, found = gen.summary_rows(tools), sections.pop(name, None)
        if found is None:
            problems.append(f"no '## {name}' section listing its tools")
            continue
        for row in expected:
            if row not in found:
                problems.append(f"{name}: missing or different, expected: {row}")
        for row in found:
            if row not in expected:
                problems.append(f"{name}: not a live tool or not its live summary: {row}")
    for name in sections:
        if name not in catalog.missing:
            problems.append(f"'## {name}': no such server")
    return problems


def test_the_tools_index_lists_every_live_tool_with_its_summary(catalog: Any) -> None:
    problems = index_problems(TOOLS_INDEX.read_text(encoding="utf-8"), catalog)
    assert not problems, (
        "docs/tools/index.md disagrees with the live tools; rewrite it with "
        "`python docs/_hooks/tool_reference.py > docs/tools/index.md`:\n" + "\n".join(problems)
    )


def test_the_index_checker_catches_a_missing_tool_and_a_changed_summary(catalog: Any) -> None:
    text = gen.render_tools_index(catalog)
    assert index_problems(text, catalog) == []
    tool = catalog.tools["memory-tools"][0]
    row = gen.summary_rows([tool])[0]
    assert any("missing" in p for p in index_problems(text.replace(row + "\n", ""), catalog))
    changed = text.replace(row, row[:-2] + " More. |")
    assert any(tool.name in p for p in index_problems(changed, catalog))


@pytest.mark.parametrize("path", TOOL_PAGES, ids=[p.stem for p in TOOL_PAGES])
def test_tool_page_hand_written_parts(path: Path, catalog: Any) -> None:
    tool = catalog.find(path.stem)
    server = tool.server if tool else None
    known = {t.name for tools in catalog.tools.values() for t in tools}
    if server is not None:
        known |= settings_names(server)
    page = f"docs/tools/{path.name}"
    problems = page_problems(
        page, path.read_text(encoding="utf-8"), tool, known, tool.schema if tool else None
    )
    if problems:
        pytest.fail(f"{page}:\n" + "\n".join(f"  - {p}" for p in problems), pytrace=False)


def test_page_checker_catches_each_kind_of_drift() -> None:
    """The checker itself: a page with one of each mistake gets one message for each."""
    tool = gen.Tool(
        name="alpha",
        server="demo",
        description="Do alpha.",
        schema={
            "type": "object",
            "properties": {"a_key": {"type": "string"}, "count": {"type": "integer"}},
            "required": ["a_key"],
        },
        annotations={},
    )
    page = """\
# `alpha`

Give `a_key`, `old_name: 3` and `some_setting`; `plain` words and `isError` are fine.

<!-- tool-reference: other/alpha -->

```bash
`not_checked` inside a fence
```

## Example

```json
{"count": "two", "gone": 1}
```
"""
    problems = "\n".join(page_problems("alpha.md", page, tool, {"some_setting"}, tool.schema))
    assert "alpha is served by demo, not other" in problems
    assert "`old_name` is not a parameter of alpha" in problems
    assert "remove 'gone' from the example" in problems
    assert "'a_key' is a required property" in problems
    assert "'two' is not of type 'integer'" in problems
    for fine in ("`a_key`", "some_setting", "plain", "isError", "not_checked"):
        assert f"{fine} is not a parameter" not in problems

    assert "not valid JSON" in "\n".join(
        page_problems("alpha.md", page.replace('"two"', "two"), tool, set(), tool.schema)
    )
    assert "exactly one line" in "\n".join(
        page_problems(
            "alpha.md", page.replace("<!-- tool-reference: other/alpha -->", ""), tool, set(), None
        )
    )
    fixed = page.replace("other/alpha", "demo/alpha").replace("`old_name: 3` and ", "")
    fixed = fixed.replace('{"count": "two", "gone": 1}', '{"a_key": "x", "count": 2}')
    assert page_problems("alpha.md", fixed, tool, {"some_setting"}, tool.schema) == []


def table_rows(markdown: str, header: str) -> list[list[str]]:
    """The cells of the Markdown table under the line *header*."""
    lines = markdown.splitlines()
    start = lines.index(header)
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip("|"))])
    return rows


def test_the_generator_renders_every_live_tool_as_its_schema_says(catalog: Any) -> None:
    rendered = 0
    for tools in catalog.tools.values():
        for tool in tools:
            block = gen.render_tool(tool)
            properties = tool.schema.get("properties") or {}
            required = set(tool.schema.get("required") or [])
            if not properties:
                assert "This tool takes no parameters." in block, tool.name
            else:
                rows = table_rows(block, "| name | type | required | default | description |")
                top = {r[0].strip("`"): r for r in rows if "." not in r[0] and "[]" not in r[0]}
                assert list(top) == list(properties), tool.name
                for name, row in top.items():
                    assert row[2] == ("yes" if name in required else "no"), (tool.name, name)
                    if "default" in properties[name]:
                        assert row[3] == f"`{json.dumps(properties[name]['default'])}`"
            hints = table_rows(block, "| read-only | destructive | idempotent | open world |")
            expected = [
                gen.hint(tool.annotations.get(key))
                for key in (
                    "read_only_hint",
                    "destructive_hint",
                    "idempotent_hint",
                    "open_world_hint",
                )
            ]
            assert hints == [expected], tool.name
            assert f"../servers/{tool.server}.md" in block
            rendered += 1
    assert rendered >= 25  # memory-tools 11 + filesystem 14 (+ popoto-memory 4)


def test_the_generator_reads_nested_and_optional_types() -> None:
    schema = {
        "type": "object",
        "$defs": {
            "Edit": {
                "type": "object",
                "properties": {"oldText": {"type": "string", "description": "a | b <c>"}},
                "required": ["oldText"],
            }
        },
        "properties": {
            "head": {
                "anyOf": [{"type": "integer", "minimum": 0}, {"type": "null"}],
                "default": None,
            },
            "sortBy": {"enum": ["name", "size"], "default": "name"},
            "edits": {"type": "array", "items": {"$ref": "#/$defs/Edit"}, "minItems": 1},
            "importance": {"type": "number", "minimum": 0, "maximum": 1},
        },
        "required": ["edits"],
    }
    rows = {row[0]: row for row in gen.parameter_rows(schema)}
    assert rows["head"][1:4] == ("integer ≥ 0, or null", False, "null")
    assert rows["sortBy"][1] == 'one of `"name"`, `"size"`'
    assert rows["edits"][1:3] == ("array of objects (at least 1)", True)
    assert rows["edits[].oldText"][1:3] == ("string", True)
    assert rows["importance"][1] == "number 0–1"
    assert gen.escape("a | b <c> *x*") == r"a \| b &lt;c&gt; \*x\*"


def run_mkdocs(site: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    for module in ("mkdocs", "material", "mkdocstrings_handlers"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed (pip install -e '.[docs]')")
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1", **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.slow
def test_mkdocs_build_strict(tmp_path: Path, catalog: Any) -> None:
    site = tmp_path / "site"
    result = run_mkdocs(site)
    assert result.returncode == 0, (
        "mkdocs build --strict failed:\n" + result.stdout[-4000:] + result.stderr[-4000:]
    )
    page = (site / "tools" / "write_memory" / "index.html").read_text(encoding="utf-8")
    assert "<code>key</code>" in page and "The text to remember" in page  # generated table
    assert "Prefers concise answers" in page  # the hand-written example
    overview = (site / "servers" / "memory-tools" / "index.html").read_text(encoding="utf-8")
    assert 'href="../../tools/write_memory/"' in overview  # the generated index links it
    for tools in catalog.tools.values():
        for tool in tools:
            assert (site / "tools" / tool.name / "index.html").exists(), tool.name


@pytest.mark.slow  # (a second whole mkdocs build, in an environment without the extra)
def test_mkdocs_build_without_popoto_notes_what_is_missing(tmp_path: Path) -> None:
    """popoto is an optional extra: without it the docs still build, and say why the
    popoto-memory tables are missing."""
    blocker = tmp_path / "blocker" / "popoto"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'popoto'\", name='popoto')\n"
    )
    site = tmp_path / "site"
    pythonpath = os.pathsep.join(filter(None, [str(blocker.parent), os.environ.get("PYTHONPATH")]))
    result = run_mkdocs(site, {"PYTHONPATH": pythonpath})
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    page = (site / "tools" / "memory_search" / "index.html").read_text(encoding="utf-8")
    assert "Generated reference unavailable" in page
    assert "doc-processing-std-tools[popoto]" in page
    assert "deploy process" in page  # the hand-written part is still there
    assert "<code>path</code>" in (site / "tools" / "memory_view" / "index.html").read_text(
        encoding="utf-8"
    )
