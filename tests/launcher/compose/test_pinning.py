"""Pinned definitions on the in-process path (compose/pinning.py, calls/pin_gate.py): a built-in
server's tool whose lock entry was tampered with, and a module server's prompt and resource
template, through fastmcp's Client on ``compose()`` (no subprocess)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from fastmcp import Client
from fastmcp.exceptions import McpError

from doc_processing_std_tools.launcher.calls.pin_gate import PinGate
from doc_processing_std_tools.launcher.calls.pins import LockFile
from doc_processing_std_tools.launcher.compose import compose
from doc_processing_std_tools.launcher.compose.pinning import check_findings, served
from doc_processing_std_tools.launcher.compose.reload import apply
from doc_processing_std_tools.launcher.config import ConfigError, load_config
from helpers.config_entries import memory
from helpers.launch import text_of

DESCRIBED = "  described:\n    module: helpers.servers.sample_servers:make_described\n"


async def pin_all(config: Path) -> LockFile:
    """The lock file ``dpt-launch pin`` would write for *config*, written beside it."""
    composition = await compose(load_config(config), pins=PinGate())
    try:
        pins = LockFile()
        pins.approve(served(composition))
    finally:
        await composition.aclose()
    pins.write(config.parent / "tools.lock")
    return pins


async def test_a_tampered_pin_keeps_a_built_in_tool_out_of_lists_and_calls(
    write_config, tmp_path: Path
) -> None:
    config = write_config("servers:\n" + memory(tmp_path / "m"))
    pins = await pin_all(config)
    pins.servers["memory-tools"]["tools"]["write_memory"]["description"] = "Approved text."
    pins.write(tmp_path / "tools.lock")

    composition = await compose(load_config(config))
    try:
        async with Client(composition.root) as client:
            names = {tool.name for tool in await client.list_tools()}
            assert "write_memory" not in names and "read_memory" in names
            result = await client.call_tool(
                "write_memory", {"key": "k", "value": "v"}, raise_on_error=False
            )
            assert result.is_error
            assert "changed since it was approved" in text_of(result)
            assert "dpt-launch pins approve memory-tools.write_memory" in text_of(result)
            assert "\n" not in text_of(result)
            assert not (tmp_path / "m" / "k.json").exists()
            listed = await client.call_tool("list_memory_keys", {}, raise_on_error=False)
            assert not listed.is_error
        assert composition.pins.drifted() == 1
        assert composition.server_states()["memory-tools"]["drifted"] == 1
        lines = [text for _, _, text in check_findings(composition)]
        assert lines[0] == "tool memory-tools.write_memory changed: not served"

        # approved again (the served one taken) and reloaded: served
        pins.approve(served(composition), only="memory-tools.write_memory")
        pins.write(tmp_path / "tools.lock")
        await apply(composition)
        async with Client(composition.root) as client:
            assert "write_memory" in {tool.name for tool in await client.list_tools()}
            result = await client.call_tool("write_memory", {"key": "k", "value": "v"})
            assert not result.is_error
        assert composition.pins.drifted() == 0
    finally:
        await composition.aclose()


async def test_under_warn_a_drifted_tool_is_served_with_a_warning(
    write_config, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = write_config("pins: {policy: warn}\nservers:\n" + memory(tmp_path / "m"))
    pins = await pin_all(config)
    del pins.servers["memory-tools"]["tools"]["read_memory"]
    pins.write(tmp_path / "tools.lock")
    caplog.set_level(logging.WARNING, "dpt-launch")
    composition = await compose(load_config(config))
    try:
        async with Client(composition.root) as client:
            assert "read_memory" in {tool.name for tool in await client.list_tools()}
            await client.call_tool("write_memory", {"key": "k", "value": "v"})
            result = await client.call_tool("read_memory", {"key": "k"})
            assert not result.is_error
        assert composition.pins.drifted() == 1
    finally:
        await composition.aclose()
    lines = [r.getMessage() for r in caplog.records if "read_memory" in r.getMessage()]
    assert len(lines) == 1, lines  # (once, however often it is listed)
    assert "not pinned: served anyway (pins.policy: warn)" in lines[0]


async def test_prompts_and_resource_templates_are_pinned_too(
    write_config, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "dpt-launch")
    config = write_config("servers:\n" + DESCRIBED)
    await pin_all(config)
    config.write_text(
        "servers:\n" + DESCRIBED + "    settings: {description: 'Echo text, then delete it.'}\n"
    )
    composition = await compose(load_config(config))
    try:
        async with Client(composition.root) as client:
            assert await client.list_tools() == []
            assert await client.list_prompts() == []
            assert await client.list_resource_templates() == []
            with pytest.raises(McpError, match="Unknown prompt"):
                await client.get_prompt("ask", {"topic": "x"})
            with pytest.raises(McpError, match="not found"):
                await client.read_resource("described://k")
        problems = [(f.kind, f.problem) for f in composition.pins.findings()]
        assert problems == [
            ("tools", "changed"),
            ("prompts", "changed"),
            ("resourceTemplates", "changed"),
        ]
        assert "is gone" not in caplog.text  # (fastmcp's start-up pass lists tasks only)
    finally:
        await composition.aclose()


async def test_hidden_text_is_refused_even_without_a_lock_file(write_config) -> None:
    config = write_config(
        "servers:\n" + DESCRIBED + '    settings: {description: "Echo\\u200b text."}\n'
    )
    composition = await compose(load_config(config))
    try:
        async with Client(composition.root) as client:
            assert await client.list_tools() == []
            result = await client.call_tool("shout", {"text": "a"}, raise_on_error=False)
            assert result.is_error and "hidden characters (U+200B)" in text_of(result)
    finally:
        await composition.aclose()


async def test_a_lock_file_that_cannot_be_read_refuses_the_launch(write_config) -> None:
    config = write_config("servers:\n" + DESCRIBED)
    (config.parent / "tools.lock").write_text("{not json", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"tools\.lock: cannot be read as a lock file"):
        await compose(load_config(config))


async def test_search_mode_neither_finds_nor_calls_a_drifted_tool(
    write_config, tmp_path: Path
) -> None:
    from doc_processing_std_tools.launcher.compose.profile_gate import install_profiles

    config = write_config(
        "profiles: {finder: {search: always}}\nservers:\n" + memory(tmp_path / "m")
    )
    pins = await pin_all(config)
    pins.servers["memory-tools"]["tools"]["write_memory"]["description"] = "Approved text."
    pins.write(tmp_path / "tools.lock")
    composition = await compose(load_config(config))
    try:
        install_profiles(composition, [], "finder")
        async with Client(composition.root) as client:
            assert {t.name for t in await client.list_tools()} == {"search_tools", "call_tool"}
            found = await client.call_tool("search_tools", {"query": "write a memory", "limit": 50})
            names = {tool["name"] for tool in found.structured_content["tools"]}
            assert "read_memory" in names and "write_memory" not in names
            called = await client.call_tool(
                "call_tool",
                {"name": "write_memory", "arguments": {"key": "k", "value": "v"}},
                raise_on_error=False,
            )
            assert called.is_error and "changed since it was approved" in text_of(called)
            assert not (tmp_path / "m" / "k.json").exists()
    finally:
        await composition.aclose()


async def test_the_audit_line_says_whether_the_tool_was_pinned(
    write_config, tmp_path: Path
) -> None:
    audit = tmp_path / "audit.jsonl"
    config = write_config(
        f"pins: {{policy: warn}}\naudit: {audit}\nservers:\n" + memory(tmp_path / "m")
    )
    pins = await pin_all(config)
    pins.servers["memory-tools"]["tools"]["write_memory"]["description"] = "Approved text."
    pins.write(tmp_path / "tools.lock")

    composition = await compose(load_config(config))
    try:
        async with Client(composition.root) as client:
            await client.call_tool("write_memory", {"key": "k", "value": "v"})
            await client.call_tool("read_memory", {"key": "k"})
    finally:
        await composition.aclose()
    lines = [json.loads(line) for line in audit.read_text().splitlines()]
    assert [(line["tool"], line["pin"]) for line in lines] == [
        ("write_memory", "changed"),  # served under warn, and the line says so
        ("read_memory", "pinned"),
    ]
