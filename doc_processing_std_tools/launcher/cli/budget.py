"""``dpt-launch tools --budget [PROFILE]``: what the tool definitions cost a client, and what a
profile does about it.

Tokens are estimated, not counted: no tokenizer ships with the launcher (tiktoken fetches its
BPE files from the network on first use). The estimate is the compact JSON of a definition
(name, description, input schema: what a client hands the model) divided by
:data:`CHARS_PER_TOKEN`. ``benchmarks/token_estimate.py`` checks it against OpenAI's
``o200k_base`` and ``cl100k_base`` (the offline ``bpe-openai`` package) on the shipped config's
tools plus a 150-tool server: docs/clients.md has the figures.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..compose.profile_names import (
    NameMap,
    call_tool_definition,
    search_tool_definition,
    shown_tool,
)
from ..compose.profiles import resolve
from .status import table_width

CHARS_PER_TOKEN = 4


def definition(tool: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a ``tools/list`` entry a client hands the model."""
    return {k: tool[k] for k in ("name", "description", "inputSchema") if k in tool}


def estimate_tokens(tool: Mapping[str, Any]) -> int:
    """Estimated tokens of *tool*'s definition (see the module's note)."""
    text = json.dumps(definition(tool), separators=(",", ":"), ensure_ascii=False)
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def listed(composition: Any) -> list[tuple[str, dict[str, Any]]]:
    """``(server, tools/list entry)`` for every tool the composition exposes, in order."""
    rows = []
    for mount in composition.mounts:
        for tool in mount.tools:
            entry = tool.to_mcp_tool().model_dump(by_alias=True, exclude_none=True, mode="json")
            rows.append((mount.name, entry))
    return rows


def budget(composition: Any, profile_name: str | None) -> dict[str, Any]:
    """Per server and tool the estimated tokens; the totals; the profile's limits and what it
    does. Without *profile_name*, the whole list as a client without a profile gets it."""
    catalog = listed(composition)
    profile = resolve(composition.loaded.config, profile_name) if profile_name else None
    names = NameMap.build(profile, [t["name"] for _, t in catalog]) if profile else None
    shown_names = set(names.listed()) if names else {t["name"] for _, t in catalog}
    tools = []
    for server, tool in catalog:
        row: dict[str, Any] = {
            "server": server,
            "name": tool["name"],
            "tokens": estimate_tokens(tool),
            "listed": tool["name"] in shown_names,
        }
        if names is not None:
            in_profile = tool["name"] in names.shown
            row["shown_as"] = names.shown.get(tool["name"])
            row["in_profile"] = in_profile
            if in_profile:
                row["tokens_shown"] = estimate_tokens(shown_tool(tool, names))
        tools.append(row)
    servers: dict[str, dict[str, int]] = {}
    for row in tools:
        entry = servers.setdefault(row["server"], {"tools": 0, "tokens": 0})
        entry["tools"] += 1
        entry["tokens"] += row["tokens"]
    result: dict[str, Any] = {
        "estimate": f"compact JSON characters / {CHARS_PER_TOKEN}",
        "tools": tools,
        "servers": servers,
        "total": {"tools": len(tools), "tokens": sum(r["tokens"] for r in tools)},
    }
    if profile is None or names is None:
        return result
    extra = [search_tool_definition(profile), call_tool_definition()] if names.searching() else []
    shown_tokens = sum(r.get("tokens_shown", 0) for r in tools if r["listed"])
    shown_tokens += sum(estimate_tokens(t) for t in extra)
    budget_ = profile.name_budget
    long_names = [r["name"] for r in tools if budget_ is not None and len(r["name"]) > budget_]
    admitted = [r for r in tools if r.get("in_profile")]
    exceeded = []
    if profile.max_tools is not None and len(tools) > profile.max_tools:
        exceeded.append(f"max_tools {profile.max_tools}: {len(tools)} tools")
    if long_names:
        exceeded.append(
            f"max_name_length {profile.max_name_length} (tool names up to {budget_} characters "
            f"once the client adds {profile.name_prefix or 'nothing'!r}): {len(long_names)} longer"
        )
    if profile.max_tool_tokens is not None and result["total"]["tokens"] > profile.max_tool_tokens:
        exceeded.append(
            f"max_tool_tokens {profile.max_tool_tokens}: ~{result['total']['tokens']} tokens"
        )
    does = []
    if len(admitted) < len(tools):
        does.append(f"include/exclude leave {len(admitted)} of {len(tools)} tools")
    if names.searching():
        does.append(
            f"search mode: lists {len(names.listed())} pinned tools plus {', '.join(t['name'] for t in extra)}; "
            "the others are found with search_tools and called with call_tool"
        )
    elif profile.max_tools is not None and len(admitted) > profile.max_tools:
        does.append(f"search is off: only the first {profile.max_tools} are listed")
    shortened = [r for r in admitted if r["shown_as"] != r["name"]]
    if shortened:
        does.append(f"shortens {len(shortened)} names to fit")
    if profile.descriptions == "short":
        does.append("keeps the first sentence of each description")
    if profile.max_tool_tokens is not None and shown_tokens > profile.max_tool_tokens:
        does.append(
            f"still ~{shown_tokens} tokens, over max_tool_tokens: the client's own rule applies"
        )
    result["profile"] = {
        "name": profile.name,
        "limits": {
            "max_tools": profile.max_tools,
            "max_name_length": profile.max_name_length,
            "name_prefix": profile.name_prefix,
            "max_tool_tokens": profile.max_tool_tokens,
            "search": profile.search,
        },
        "exceeded": exceeded,
        "does": does or ["nothing: the whole list fits"],
        "shown": {"tools": len(names.listed()) + len(extra), "tokens": shown_tokens},
        "problems": names.problems(),
    }
    return result


def print_budget(report: dict[str, Any]) -> None:
    """The report for a person: one table per server's tools, then the totals and the profile."""
    console = Console(highlight=False, width=table_width())
    profiled = "profile" in report
    table = Table(title="Tool definitions (estimated tokens)", title_justify="left")
    for column in ("server", "tool", "tokens", *(("shown as", "listed") if profiled else ())):
        table.add_column(column, overflow="fold", justify="right" if column == "tokens" else "left")
    for row in report["tools"]:
        cells = [row["server"], row["name"], str(row["tokens"])]
        if profiled:
            shown = row.get("shown_as")
            cells += [
                "(left out)" if shown is None else ("" if shown == row["name"] else shown),
                "yes" if row["listed"] else "",
            ]
        table.add_row(*(escape(c) for c in cells))
    console.print(table)
    for server, entry in report["servers"].items():
        console.print(f"{escape(server)}: {entry['tools']} tools, ~{entry['tokens']} tokens")
    total = report["total"]
    console.print(
        f"total: {total['tools']} tools, ~{total['tokens']} tokens "
        f"(estimate: {report['estimate']}; docs/clients.md)"
    )
    profile = report.get("profile")
    if profile is None:
        return
    console.print(f"\nprofile {escape(profile['name'])}:")
    for line in profile["exceeded"] or ["no limit exceeded"]:
        console.print(f"  exceeds {escape(line)}" if profile["exceeded"] else f"  {line}")
    for line in profile["does"]:
        console.print(f"  does: {escape(line)}")
    shown = profile["shown"]
    console.print(f"  the client gets {shown['tools']} tools, ~{shown['tokens']} tokens")
    for line in profile["problems"]:
        console.print(f"  refused at launch: {escape(line)}")
