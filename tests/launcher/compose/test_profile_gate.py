"""The profile gate's own decisions, without a launcher: what a call of a name no tool has yet
(an unlisted call, compose/unlisted_calls.py) becomes behind a profile's include/exclude."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from fastmcp import FastMCP

from doc_processing_std_tools.launcher.compose import compose
from doc_processing_std_tools.launcher.compose.profile_gate import (
    UNKNOWN,
    HttpTables,
    ProfileGate,
    http_tables,
)
from doc_processing_std_tools.launcher.compose.profiles import Profile
from doc_processing_std_tools.launcher.compose.reload import apply
from doc_processing_std_tools.launcher.config import load_config
from helpers.compositions import Composed
from helpers.config_entries import external


@dataclass(frozen=True)
class _Ctx:
    """What the gate reads of an SDK middleware context (it rewrites it with ``replace``)."""

    method: str
    params: dict[str, Any]
    request: Any = None
    protocol_version: str = "2025-06-18"
    seen: list[str] = field(default_factory=list)


def _gate(profile: Profile) -> ProfileGate:
    mounts = [SimpleNamespace(tools=[SimpleNamespace(name="ns_listed")])]
    return ProfileGate(Composed(mounts=mounts, root=None), {"p": profile}, "p")


async def _called_as(gate: ProfileGate, name: str) -> str:
    """The name the rest of the chain is asked for when the client calls *name*."""
    asked: list[str] = []

    async def call_next(ctx: Any) -> Any:
        asked.append(ctx.params["name"])
        return {"content": [{"type": "text", "text": f"Unknown tool: {ctx.params['name']!r}"}]}

    await gate(_Ctx("tools/call", {"name": name, "arguments": {}}), call_next)
    return asked[0]


async def test_an_unlisted_name_the_profile_leaves_out_reaches_no_server() -> None:
    gate = _gate(Profile(name="p", exclude=("*fine",)))
    assert await _called_as(gate, "ns_unlistedfine") == UNKNOWN
    assert await _called_as(gate, "ns_unlistedother") == "ns_unlistedother"


async def test_an_unlisted_name_outside_the_profiles_include_reaches_no_server() -> None:
    gate = _gate(Profile(name="p", include=("ns_listed",)))
    assert await _called_as(gate, "ns_hidden") == UNKNOWN
    assert await _called_as(gate, "ns_listed") == "ns_listed"


def _target(command: str | None, mode: str) -> Any:
    entry = SimpleNamespace(command=command, session_mode=mode)
    return SimpleNamespace(supervisor=SimpleNamespace(entry=entry))


def test_the_http_fast_path_takes_calls_only_with_a_per_client_command_and_follows_reloads() -> (
    None
):
    relay = SimpleNamespace(targets=lambda: targets)
    tables = HttpTables(FastMCP("t"), relay)  # type: ignore[arg-type]
    targets = {"a_x": _target("srv", "shared"), "b_y": _target(None, "per_client")}
    assert not tables.taking()  # (a shared command, a url: server: nothing it serves)
    targets = {**targets, "c_z": _target("srv", "per_client")}  # (a reload's new targets)
    assert tables.taking()
    targets = {"a_x": _target("srv", "shared")}
    assert not tables.taking()


@pytest.mark.slow  # (children of its own, two reloads; the stand-in test above is the default's)
async def test_a_reload_that_adds_a_per_client_command_turns_the_http_fast_path_on(
    write_config, tmp_path: Path
) -> None:
    shared = "servers:\n" + external("ext", tmp_path / "n") + "    sessions: shared\n"
    config = write_config(shared)
    composition = await compose(load_config(config))
    try:
        tables = http_tables(composition.root)
        assert tables is not None and not tables.taking()  # (a shared session: nothing to take)
        config.write_text(shared + external("own", tmp_path / "o"))  # (per_client: the default)
        await apply(composition)
        assert tables.taking()
        config.write_text(shared)
        await apply(composition)
        assert not tables.taking()
    finally:
        await composition.aclose()
