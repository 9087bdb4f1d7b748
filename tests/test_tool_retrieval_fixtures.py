"""The tool-retrieval benchmark's fixtures are well-formed, and the shipped config's still match
its live list (``benchmarks/tool_retrieval.py`` measures with them; ``tests/tool_fixtures.py``
says what each holds)."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
from tool_fixtures import (
    EXTERNAL,
    FIXTURES,
    HELDOUT,
    QUERIES,
    SHIPPED,
    exposed,
    fixture_problems,
    live_shipped,
    read,
)


def servers() -> list[dict[str, Any]]:
    return read(SHIPPED)["servers"] + read(EXTERNAL)["servers"]


def queries() -> list[dict[str, Any]]:
    return list(read(QUERIES)["queries"])


def test_the_fixtures_are_well_formed_and_large_enough() -> None:
    assert fixture_problems(servers(), queries()) == []
    assert len(exposed(read(EXTERNAL)["servers"])) >= 120
    assert len(queries()) >= 60
    expected = {q["expected"] for q in queries()}
    shipped = {tool["name"] for tool in exposed(read(SHIPPED)["servers"])}
    assert len(expected & shipped) >= 15, "the queries reach the shipped tools too"
    assert len(expected - shipped) >= 40, "... and the external ones"


def test_the_held_out_queries_are_well_formed_and_new() -> None:
    held_out = list(read(HELDOUT)["queries"])
    assert fixture_problems(servers(), held_out) == []
    assert len(held_out) >= 40
    assert not {q["query"] for q in held_out} & {q["query"] for q in queries()}
    shipped = {tool["name"] for tool in exposed(read(SHIPPED)["servers"])}
    expected = {q["expected"] for q in held_out}
    assert expected & shipped and expected - shipped, "shipped and external tools both asked for"


def test_the_fresh_set_is_well_formed_and_new() -> None:
    """The fresh set's author counted words such as "over" and "only" as stop words when
    labelling no-overlap queries; that label is theirs, so only the rest is checked."""
    fresh = read(FIXTURES / "fresh_tools.json")["servers"]
    asked = list(read(FIXTURES / "tool_queries_fresh.json")["queries"])
    problems = fixture_problems(servers() + fresh, asked)
    assert [p for p in problems if "a no-overlap query shares" not in p] == []
    assert len(exposed(fresh)) >= 100 and len(asked) >= 60
    assert not {s["namespace"] for s in fresh} & {s["namespace"] for s in servers()} - {None}
    expected = {q["expected"] for q in asked}
    assert expected <= {tool["name"] for tool in exposed(fresh)}, "only the new servers asked"


def test_the_checker_catches_each_kind_of_flaw() -> None:
    broken = copy.deepcopy(servers())
    github = next(s for s in broken if s["server"] == "github")
    github["tools"][0]["name"] = "create issue"  # a space: refused by the OpenAI API
    github["tools"][1]["inputSchema"] = {"type": "object", "properties": {"q": {"type": 3}}}
    github["tools"][2]["inputSchema"] = {"type": "string"}
    github["tools"][3]["description"] = " "
    github["tools"].append(dict(github["tools"][4]))  # exposed twice
    asked = queries()
    asked.append({"query": "do the thing", "expected": "github_no_such_tool", "kind": "direct"})
    asked.append({"query": "find the bug", "expected": "github_search_issues", "kind": "vague"})
    asked.append(
        {"query": "search the issues", "expected": "github_search_issues", "kind": "no-overlap"}
    )
    asked.append(dict(asked[0]))
    problems = "\n".join(fixture_problems(broken, asked))
    for flaw in (
        "'github_create issue': an exposed name must match",
        "github_get_issue: inputSchema is not valid JSON Schema",
        "github_update_issue: inputSchema is not a JSON Schema of type object",
        "github_list_issues: no description",
        "'github_search_issues': two tools are exposed under this name",
        "expects 'github_no_such_tool', which no tool is exposed as",
        "'find the bug': kind must be",
        "a no-overlap query shares ['issues', 'search']",
        f"{asked[0]['query']!r}: asked twice",
    ):
        assert flaw in problems


def test_the_shipped_fixture_is_the_live_list() -> None:
    """Fails when a shipped tool's name, description or schema changes: regenerate with
    ``python benchmarks/tool_retrieval.py --regenerate``."""
    live, skipped = asyncio.run(live_shipped())
    saved = read(SHIPPED)["servers"]
    if skipped:
        saved = [server for server in saved if server["server"] not in skipped]
        if not saved:
            pytest.skip(f"every shipped server skipped: {skipped}")
    assert live == saved, "stale: python benchmarks/tool_retrieval.py --regenerate"
