"""The tool-retrieval benchmark's fixtures: loading them, checking them, and the live list they
must match (``benchmarks/tool_retrieval.py`` measures with them).

Four files under ``benchmarks/fixtures/``:

* ``shipped_tools.json``: the tools ``configs/tools.yaml`` lists (``tools/list``, as a client
  gets it, without fastmcp's ``_meta``), one entry per server. Regenerate it with
  ``python benchmarks/tool_retrieval.py --regenerate``; ``tests/benchmarks/test_tool_retrieval_fixtures.py``
  fails when it no longer matches.
* ``external_tools.json``: tool definitions of the kind public MCP servers expose, one entry per
  server with the namespace a config would give it; the tools carry the server's own names.
* ``tool_queries.json``: needs phrased as an agent would, each with the expected exposed name
  (the dev set: the ranker may be tuned on it).
* ``tool_queries_heldout.json``: more such needs in the same format, frozen before the ranker was
  tuned and never tuned against (the held-out set).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from helpers.paths import REPO

FIXTURES = REPO / "benchmarks" / "fixtures"
SHIPPED = FIXTURES / "shipped_tools.json"
EXTERNAL = FIXTURES / "external_tools.json"
QUERIES = FIXTURES / "tool_queries.json"
HELDOUT = FIXTURES / "tool_queries_heldout.json"
SHIPPED_CONFIG = REPO / "configs" / "tools.yaml"
NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")  # the OpenAI API's rule; MCP allows more
WORD = re.compile(r"[a-z0-9]+")
# Words too common to count as shared between a query and a tool (no-overlap queries).
_STOPWORDS = (
    "a an and any are as at be by can do does for from get has have how i if in into is it its "
    "me my of on or our s so that the their them then there this to up was we what when where "
    "which who why will with you your"
)
STOPWORDS = frozenset(_STOPWORDS.split())


def read(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text()))


def exposed(servers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every tool under the name the launcher exposes: ``<namespace>_<name>``, or its own name."""
    tools = []
    for server in servers:
        prefix = f"{server['namespace']}_" if server.get("namespace") else ""
        tools += [{**tool, "name": prefix + tool["name"]} for tool in server["tools"]]
    return tools


def load_catalog() -> list[dict[str, Any]]:
    """The benchmark's catalog: the shipped config's tools, then the external ones."""
    return exposed(read(SHIPPED)["servers"]) + exposed(read(EXTERNAL)["servers"])


def load_queries(path: Path = QUERIES) -> list[dict[str, Any]]:
    return list(read(path)["queries"])


def accepted(query: dict[str, Any]) -> set[str]:
    """The exposed names that answer *query*: the expected one and any listed in ``also``."""
    return {query["expected"], *query.get("also", ())}


def content_words(text: str) -> set[str]:
    """Lower-case words of *text* (``snake_case`` and ``camelCase`` split), stopwords left out."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", text).replace("_", " ")
    return set(WORD.findall(spaced.lower())) - STOPWORDS


def tool_words(tool: dict[str, Any]) -> set[str]:
    """The words a search over names, descriptions and parameter names can see."""
    parameters = tool.get("inputSchema", {}).get("properties", {})
    return content_words(" ".join([tool["name"], tool.get("description") or "", *parameters]))


def schema_problems(tool: dict[str, Any]) -> list[str]:
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    problems = []
    for key in ("inputSchema", "outputSchema"):
        schema = tool.get(key)
        if schema is None and key == "outputSchema":
            continue
        if not isinstance(schema, dict) or schema.get("type") != "object":
            problems.append(f"{tool['name']}: {key} is not a JSON Schema of type object")
            continue
        try:
            Draft202012Validator.check_schema(schema)
        except SchemaError as exc:
            problems.append(f"{tool['name']}: {key} is not valid JSON Schema: {exc.message}")
    return problems


def fixture_problems(servers: list[dict[str, Any]], queries: list[dict[str, Any]]) -> list[str]:
    """What is wrong with a catalog (servers as in the fixtures) and its queries, one line each."""
    problems: list[str] = []
    tools = exposed(servers)
    by_name: dict[str, dict[str, Any]] = {}
    for tool in tools:
        name = tool["name"]
        if not NAME.match(name):
            problems.append(f"{name!r}: an exposed name must match {NAME.pattern}")
        if name in by_name:
            problems.append(f"{name!r}: two tools are exposed under this name")
        by_name[name] = tool
        if not (tool.get("description") or "").strip():
            problems.append(f"{name}: no description")
        problems += schema_problems(tool)
    seen: set[str] = set()
    for query in queries:
        text = query["query"]
        if text in seen:
            problems.append(f"{text!r}: asked twice")
        seen.add(text)
        for name in sorted(accepted(query)):
            if name not in by_name:
                problems.append(f"{text!r}: expects {name!r}, which no tool is exposed as")
        if query.get("kind") not in ("direct", "paraphrase", "no-overlap"):
            problems.append(f"{text!r}: kind must be direct, paraphrase or no-overlap")
        elif query["kind"] == "no-overlap" and query["expected"] in by_name:
            shared = content_words(text) & tool_words(by_name[query["expected"]])
            if shared:
                problems.append(f"{text!r}: a no-overlap query shares {sorted(shared)}")
    return problems


async def live_shipped() -> tuple[list[dict[str, Any]], list[str]]:
    """The servers of ``configs/tools.yaml`` with the tools they list, as ``shipped_tools.json``
    holds them, built in-process (no lifespan runs, nothing starts); and the servers skipped
    (popoto-memory without its extra)."""
    from doc_processing_std_tools.launcher.compose.composition import compose
    from doc_processing_std_tools.launcher.config.schema import load_config

    composition = await compose(load_config(str(SHIPPED_CONFIG)))
    try:
        listed = {tool.name: tool for tool in await composition.root.list_tools()}
        servers = [
            {
                "server": mount.name,
                "namespace": None,  # the names below are already the exposed ones
                "tools": [
                    without_meta(
                        listed[tool.name]
                        .to_mcp_tool()
                        .model_dump(by_alias=True, exclude_none=True, mode="json")
                    )
                    for tool in mount.tools
                ],
            }
            for mount in composition.mounts
        ]
        return servers, [name for name, _ in composition.skipped]
    finally:
        await composition.aclose()


def without_meta(tool: dict[str, Any]) -> dict[str, Any]:
    """A listed tool without ``_meta`` (fastmcp's tags, which no model is shown)."""
    return {key: value for key, value in tool.items() if key != "_meta"}
