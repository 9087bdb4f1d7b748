"""completion/complete for mounted servers (launcher/compose/completions.py): asked of the
server that exposes the reference under its own names; ``completions`` declared only when a
mounted server offers it. (External servers: tests/end_to_end/test_differential_everything.py.)"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import mcp_types
from fastmcp import Client, FastMCP

from doc_processing_std_tools.launcher.compose.completions import (
    install_completions,
    owner,
    with_capability,
)
from doc_processing_std_tools.launcher.compose.owners import Owners
from helpers.compositions import Composed


def mount(server: FastMCP, namespace: str | None, prompts: tuple[str, ...] = (), resources=()):
    entry = SimpleNamespace(namespace=namespace)
    return SimpleNamespace(
        server=server, supervisor=None, prompts=prompts, resources=resources, entry=entry
    )


def test_the_owner_is_found_by_the_exposed_name_and_asked_under_its_own() -> None:
    mounts = [
        mount(FastMCP("a"), "ev", prompts=("ev_greet",)),
        mount(FastMCP("b"), "fs", resources=("file://fs/{path}",)),
    ]
    found = owner(Owners(mounts), "ev_greet", prompt=True)
    assert found is not None and found[0] is mounts[0] and found[1] == "greet"
    found = owner(Owners(mounts), "file://fs/{path}", prompt=False)
    assert found is not None and found[0] is mounts[1] and found[1] == "file://{path}"
    assert owner(Owners(mounts), "greet", prompt=True) is None


def test_a_capability_is_added_to_either_shape_of_initialize_result_once() -> None:
    typed = mcp_types.InitializeResult(
        protocol_version="2025-11-25",
        capabilities=mcp_types.ServerCapabilities(),
        server_info=mcp_types.Implementation(name="x", version="1"),
    )
    added = with_capability(typed, "completions", mcp_types.CompletionsCapability())
    assert added.capabilities.completions is not None and typed.capabilities.completions is None
    assert with_capability(
        {"capabilities": {}}, "completions", mcp_types.CompletionsCapability()
    ) == {"capabilities": {"completions": {}}}
    kept = {"capabilities": {"completions": {"x": 1}}}
    assert with_capability(kept, "completions", mcp_types.CompletionsCapability()) is kept


def composed(child: FastMCP) -> FastMCP:
    root = FastMCP("root")
    root.mount(child, namespace="ns")
    install_completions(Composed(root=root, mounts=[mount(child, "ns", ("ns_poem",))]))
    return root


async def test_an_in_process_servers_completion_handler_answers_under_its_own_names() -> None:
    child = FastMCP("child")
    asked: list[Any] = []

    @child.prompt
    def poem(theme: str) -> str:
        return f"a poem about {theme}"

    @child.completion
    def complete(ref: Any, argument: Any, context: Any) -> list[str]:
        asked.append(ref.name)
        return [o for o in ("nature", "night") if o.startswith(argument.value)]

    async with Client(composed(child), mode="legacy") as client:
        assert client.initialize_result is not None
        assert client.initialize_result.capabilities.completions is not None
        ref = mcp_types.PromptReference(name="ns_poem")
        completion = await client.complete(ref, {"name": "theme", "value": "n"})
        unknown = await client.complete(
            mcp_types.PromptReference(name="nope"), {"name": "theme", "value": "n"}
        )
    assert completion.values == ["nature", "night"] and asked == ["poem"]
    assert unknown.values == []


async def test_no_completions_declared_when_no_mounted_server_offers_them() -> None:
    child = FastMCP("child")

    @child.prompt
    def poem(theme: str) -> str:
        return theme

    async with Client(composed(child), mode="legacy") as client:
        assert client.initialize_result is not None
        assert client.initialize_result.capabilities.completions is None


async def test_a_2026_era_client_is_told_of_completions_too() -> None:
    child = FastMCP("child")

    @child.prompt
    def poem(theme: str) -> str:
        return theme

    @child.completion
    def complete(ref: Any, argument: Any, context: Any) -> list[str]:
        return ["nature"]

    async with Client(composed(child)) as client:  # (fastmcp's default: server/discover)
        assert client.server_capabilities is not None
        assert client.server_capabilities.completions is not None
        completion = await client.complete(
            mcp_types.PromptReference(name="ns_poem"), {"name": "theme", "value": "n"}
        )
    assert completion.values == ["nature"]
