"""The filesystem server through an MCP client: every tool, settings, and a containment suite."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from anyio import fail_after as anyio_fail_after
from fastmcp import Client, FastMCP
from mcp.types import AudioContent, EmbeddedResource, ImageContent
from pydantic import ValidationError

from doc_processing_std_tools import filesystem as fsmod
from doc_processing_std_tools import locking
from doc_processing_std_tools.containment import Jail
from doc_processing_std_tools.filesystem import Settings, create_server
from doc_processing_std_tools.filesystem import writes as fs_writes
from helpers.trees import snapshot, swap_pair, swapping

SECRET = "TOP-SECRET-9c1e"

READ_TOOLS = {
    "read_text_file",
    "read_file",
    "read_media_file",
    "read_multiple_files",
    "list_directory",
    "list_directory_with_sizes",
    "directory_tree",
    "search_files",
    "get_file_info",
    "list_allowed_directories",
}
WRITE_TOOLS = {"write_file", "edit_file", "create_directory", "move_file"}


# -- fixtures and helpers -----------------------------------------------------------


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    base = tmp_path.resolve()
    root, root2 = base / "root", base / "root2"
    evil, out, home = base / "root-evil", base / "outside", base / "home"
    for folder in (root / "sub", root2, evil, out / "inner", home):
        folder.mkdir(parents=True)
    (root / "a.txt").write_text("alpha\nbeta\ngamma\n")
    (root / "victim.txt").write_text("victim")
    (root2 / "file2.txt").write_text("root2 content")
    for folder in (evil, out, out / "inner", home):
        (folder / "secret.txt").write_text(f"{SECRET}\n")
    links = {
        "link_file_out": out / "secret.txt",
        "link_dir_out": out,
        "chain1": "chain2",
        "chain2": out / "secret.txt",
        "chain_dir1": "chain_dir2",
        "chain_dir2": "../outside",
        "rel_link_out": "../outside",
        "sub/deep_link": "../../outside",
        "sub/link_up": "../..",
        "dangling_out": out / "missing.txt",
        "dangling_out_dir": out / "missing_dir",
        "dangling_in": root / "nothere.txt",
        "link_to_root2": root2,
        "rel_link_root2": "../root2",
        "link_evil": evil,
        "link_parent": "..",
        "link_abs_dotdot": f"{root}/../outside",
        "loop1": "loop2",
        "loop2": "loop1",
        "link_inner_chain": root2 / "link_out",
    }
    for name, target in links.items():
        os.symlink(target, root / name)
    os.symlink(out, root2 / "link_out")
    monkeypatch.setenv("HOME", str(home))
    return {"base": base, "root": root, "root2": root2, "evil": evil, "out": out, "home": home}


def outside_state(world: dict[str, Path]) -> dict[str, tuple]:
    return snapshot(world["base"], skip=(world["root"], world["root2"]))


@pytest.fixture
async def client(world: dict[str, Path]) -> AsyncIterator[Client]:
    settings = Settings(roots=[world["root"], world["root2"]])
    async with Client(create_server(settings)) as c:
        yield c


async def call(client: Client, tool: str, **args: Any) -> tuple[bool, str, Any]:
    """(is_error, joined text, raw content)."""
    result = await client.call_tool(tool, args, raise_on_error=False)
    text = "\n".join(getattr(block, "text", "") for block in result.content)
    return result.is_error, text, result.content


async def ok(client: Client, tool: str, **args: Any) -> str:
    error, text, _ = await call(client, tool, **args)
    assert not error, text
    return text


async def fails(client: Client, tool: str, **args: Any) -> str:
    error, text, _ = await call(client, tool, **args)
    assert error, text
    assert "Traceback" not in text
    return text


# -- the tool list -------------------------------------------------------------------


async def test_tool_names_annotations_and_parameter_descriptions(client: Client) -> None:
    tools = {tool.name: tool for tool in await client.list_tools()}
    assert set(tools) == READ_TOOLS | WRITE_TOOLS
    for name, tool in tools.items():
        hints = tool.annotations
        assert hints is not None
        assert hints.open_world_hint is False
        assert hints.read_only_hint is (name in READ_TOOLS), name
        assert hints.destructive_hint is (name in {"write_file", "edit_file"}), name
        assert isinstance(hints.idempotent_hint, bool)
        props = tool.input_schema.get("properties", {})
        for param, schema in props.items():
            assert schema.get("description"), f"{name}.{param} has no description"
    expected = {
        "read_text_file": {"path", "head", "tail"},
        "read_file": {"path", "head", "tail"},
        "read_media_file": {"path"},
        "read_multiple_files": {"paths"},
        "write_file": {"path", "content"},
        "edit_file": {"path", "edits", "dryRun"},
        "create_directory": {"path"},
        "list_directory": {"path", "offset"},
        "list_directory_with_sizes": {"path", "sortBy", "offset"},
        "directory_tree": {"path", "excludePatterns"},
        "move_file": {"source", "destination"},
        "search_files": {"path", "pattern", "excludePatterns", "offset"},
        "get_file_info": {"path"},
        "list_allowed_directories": set(),
    }
    for name, params in expected.items():
        assert set(tools[name].input_schema.get("properties", {})) == params, name
    item = tools["edit_file"].input_schema["properties"]["edits"]["items"]
    assert set(item["properties"]) == {"oldText", "newText"}
    assert all(p.get("description") for p in item["properties"].values())
    assert "DEPRECATED" in (tools["read_file"].description or "")
    assert tools["write_file"].annotations.idempotent_hint is True
    assert tools["move_file"].annotations.idempotent_hint is False


async def test_read_only_registers_no_writing_tool(world: dict[str, Path]) -> None:
    server = create_server(Settings(roots=[world["root"]], read_only=True))
    async with Client(server) as c:
        names = {tool.name for tool in await c.list_tools()}
        assert names == READ_TOOLS
        assert "Unknown tool" in await fails(c, "write_file", path="x", content="y")
    assert not (world["root"] / "x").exists()


# -- reading ---------------------------------------------------------------------------


async def test_read_text_file(client: Client, world: dict[str, Path]) -> None:
    assert await ok(client, "read_text_file", path="a.txt") == "alpha\nbeta\ngamma\n"
    assert (await ok(client, "read_text_file", path=str(world["root"] / "a.txt"))).startswith("a")
    assert await ok(client, "read_text_file", path="a.txt", head=2) == "alpha\nbeta"
    assert await ok(client, "read_text_file", path="a.txt", tail=2) == "beta\ngamma"
    assert await ok(client, "read_text_file", path="a.txt", head=10) == "alpha\nbeta\ngamma"
    assert await ok(client, "read_text_file", path="a.txt", tail=10) == "alpha\nbeta\ngamma"
    assert await ok(client, "read_text_file", path="a.txt", head=0) == ""
    assert await ok(client, "read_text_file", path=f"{world['root2']}/file2.txt") == "root2 content"
    assert "both" in await fails(client, "read_text_file", path="a.txt", head=1, tail=1)
    await fails(client, "read_text_file", path="a.txt", head=-1)
    assert "No such file" in await fails(client, "read_text_file", path="missing.txt")
    assert "directory" in await fails(client, "read_text_file", path="sub")
    await fails(client, "read_text_file")  # missing argument
    await fails(client, "read_text_file", path="a.txt", bogus=1)


async def test_read_text_file_crlf_and_invalid_utf8(client: Client, world: dict[str, Path]) -> None:
    (world["root"] / "crlf.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    assert await ok(client, "read_text_file", path="crlf.txt", tail=2) == "two\nthree"
    assert await ok(client, "read_text_file", path="crlf.txt", head=1) == "one"
    assert await ok(client, "read_text_file", path="crlf.txt") == "one\r\ntwo\r\nthree\r\n"
    (world["root"] / "bin.txt").write_bytes(b"ok\xff\n")
    assert await ok(client, "read_text_file", path="bin.txt") == "ok\ufffd\n"


async def test_big_files_need_head_or_tail(world: dict[str, Path]) -> None:
    lines = [f"line {i}" for i in range(50_000)]
    (world["root"] / "big.log").write_text("\n".join(lines) + "\n")
    server = create_server(Settings(roots=[world["root"]], max_read_bytes=4096))
    async with Client(server) as c:
        message = await fails(c, "read_text_file", path="big.log")
        assert "max_read_bytes" in message and "head" in message and "tail" in message
        assert await ok(c, "read_text_file", path="big.log", head=3) == "line 0\nline 1\nline 2"
        assert await ok(c, "read_text_file", path="big.log", tail=2) == "line 49998\nline 49999"
        text = await ok(c, "read_text_file", path="big.log", head=40_000)
        assert "truncated" in text and len(text) < 5000
        text = await ok(c, "read_text_file", path="big.log", tail=40_000)
        assert "truncated" in text and "line 49999" in text and len(text) < 5000
        assert "max_read_bytes" in await fails(c, "read_media_file", path="big.log")
        multi = await ok(c, "read_multiple_files", paths=["big.log"])
        assert "Error - " in multi


async def test_read_file_is_a_deprecated_alias(client: Client) -> None:
    assert await ok(client, "read_file", path="a.txt", tail=1) == "gamma"
    assert "No such file" in await fails(client, "read_file", path="nope")


async def test_read_media_file(client: Client, world: dict[str, Path]) -> None:
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(40))
    (world["root"] / "pic.PNG").write_bytes(png)
    (world["root"] / "sound.wav").write_bytes(b"RIFF1234WAVE")
    (world["root"] / "data.bin").write_bytes(b"\x00\x01\x02")
    _, _, content = await call(client, "read_media_file", path="pic.PNG")
    assert isinstance(content[0], ImageContent)
    assert content[0].mime_type == "image/png"
    assert base64.b64decode(content[0].data) == png
    _, _, content = await call(client, "read_media_file", path="sound.wav")
    assert isinstance(content[0], AudioContent) and content[0].mime_type == "audio/wav"
    assert base64.b64decode(content[0].data) == b"RIFF1234WAVE"
    _, _, content = await call(client, "read_media_file", path="data.bin")
    assert isinstance(content[0], EmbeddedResource)
    assert content[0].resource.mime_type == "application/octet-stream"
    assert base64.b64decode(content[0].resource.blob) == b"\x00\x01\x02"
    assert str(content[0].resource.uri).startswith("file://")
    assert "No such file" in await fails(client, "read_media_file", path="none.png")
    await fails(client, "read_media_file", path="sub")


async def test_read_multiple_files(client: Client) -> None:
    text = await ok(client, "read_multiple_files", paths=["a.txt", "missing.txt", "victim.txt"])
    parts = text.split("\n---\n")
    assert parts[0] == "a.txt:\nalpha\nbeta\ngamma\n\n"
    assert parts[1].startswith("missing.txt: Error - No such file")
    assert parts[2] == "victim.txt:\nvictim\n"
    await fails(client, "read_multiple_files", paths=[])
    await fails(client, "read_multiple_files", paths="a.txt")


async def test_list_directory(client: Client, world: dict[str, Path]) -> None:
    lines = (await ok(client, "list_directory", path=".")).splitlines()
    assert "[FILE] a.txt" in lines and "[DIR] sub" in lines
    assert "[FILE] link_dir_out" in lines  # a symlink is never followed
    assert (
        await ok(client, "list_directory", path=str(world["root2"]))
        == "[FILE] file2.txt\n[FILE] link_out"
    )
    assert "No such file" in await fails(client, "list_directory", path="nope")
    assert "Not a directory" in await fails(client, "list_directory", path="a.txt")


async def test_list_directory_with_sizes(client: Client, world: dict[str, Path]) -> None:
    folder = world["root"] / "sized"
    folder.mkdir()
    (folder / "small").write_bytes(b"x" * 10)
    (folder / "large").write_bytes(b"x" * 3000)
    (folder / "dir").mkdir()
    by_name = (await ok(client, "list_directory_with_sizes", path="sized")).splitlines()
    assert by_name[0].startswith("[DIR] dir")
    assert by_name[1].startswith("[FILE] large") and by_name[1].endswith("2.93 KB")
    assert by_name[2].startswith("[FILE] small") and by_name[2].endswith("10 B")
    assert "Total: 2 files, 1 directories" in by_name
    assert "Combined size: 2.94 KB" in by_name
    by_size = (
        await ok(client, "list_directory_with_sizes", path="sized", sortBy="size")
    ).splitlines()
    assert [line.split()[1] for line in by_size[:3]] == ["large", "small", "dir"]
    assert "name" in await fails(client, "list_directory_with_sizes", path="sized", sortBy="date")
    await fails(client, "list_directory_with_sizes", path="a.txt")


async def test_directory_tree(client: Client, world: dict[str, Path]) -> None:
    base = world["root2"] / "proj"
    (base / "src" / "pkg").mkdir(parents=True)
    (base / "src" / "pkg" / "m.py").write_text("")
    (base / "node_modules" / "x").mkdir(parents=True)
    (base / "build.log").write_text("")
    (base / "empty").mkdir()
    os.symlink(world["out"], base / "out_link")
    tree = json.loads(await ok(client, "directory_tree", path=str(base)))
    by_name = {node["name"]: node for node in tree}
    assert by_name["empty"] == {"name": "empty", "type": "directory", "children": []}
    assert by_name["out_link"] == {"name": "out_link", "type": "file"}
    assert by_name["src"]["children"][0]["children"][0] == {"name": "m.py", "type": "file"}
    tree = json.loads(
        await ok(
            client, "directory_tree", path=str(base), excludePatterns=["node_modules", "*.log"]
        )
    )
    assert {node["name"] for node in tree} == {"src", "empty", "out_link"}
    tree = json.loads(await ok(client, "directory_tree", path=str(base), excludePatterns=["pkg"]))
    assert {n["name"]: n for n in tree}["src"]["children"] == []
    assert "Not a directory" in await fails(client, "directory_tree", path="a.txt")
    assert "No such file" in await fails(client, "directory_tree", path="nope")


async def test_directory_tree_and_search_stop_at_max_entries(world: dict[str, Path]) -> None:
    folder = world["root"] / "many"
    folder.mkdir()
    for i in range(30):
        (folder / f"f{i:02}.txt").write_text("")
    server = create_server(Settings(roots=[world["root"]], max_entries=10))
    async with Client(server) as c:
        text = await ok(c, "directory_tree", path="many")
        body, note = text.split("\n\n[")
        assert len(json.loads(body)) == 10 and "max_entries=10" in note
        text = await ok(c, "search_files", path="many", pattern="*.txt")
        assert len([line for line in text.splitlines() if line.endswith(".txt")]) == 10
        assert "max_entries=10" in text
        (folder / "sub").mkdir()
        text = await ok(c, "search_files", path="many/sub", pattern="*")
        assert text == "No matches found"


async def test_search_files(client: Client, world: dict[str, Path]) -> None:
    root = world["root"]
    (root / "sub" / "x.txt").write_text("")
    (root / "sub" / "y.md").write_text("")
    (root / "sub" / "skip").mkdir()
    (root / "sub" / "skip" / "z.txt").write_text("")
    (root / ".hidden.txt").write_text("")
    top = (await ok(client, "search_files", path=".", pattern="*.txt")).splitlines()
    assert str(root / "a.txt") in top and str(root / ".hidden.txt") in top
    assert str(root / "sub" / "x.txt") not in top
    deep = (await ok(client, "search_files", path=".", pattern="**/*.txt")).splitlines()
    assert str(root / "sub" / "x.txt") in deep and str(root / "sub" / "skip" / "z.txt") in deep
    assert str(root / "a.txt") in deep
    assert not any("secret" in line for line in deep)  # symlinked folders are not entered
    pruned = (
        await ok(client, "search_files", path="sub", pattern="**/*.txt", excludePatterns=["skip"])
    ).splitlines()
    assert pruned == [str(root / "sub" / "x.txt")]
    braces = await ok(client, "search_files", path="sub", pattern="*.{md,txt}")
    assert braces.splitlines() == [str(root / "sub" / "x.txt"), str(root / "sub" / "y.md")]
    assert await ok(client, "search_files", path="sub", pattern="*.zip") == "No matches found"
    await fails(client, "search_files", path="sub", pattern="")
    await fails(client, "search_files", path="a.txt", pattern="*")


@pytest.mark.parametrize(
    ("relative", "pattern", "expected"),
    [
        ("a.txt", "*.txt", True),
        ("sub/a.txt", "*.txt", False),  # * stays within one folder
        ("sub/a.txt", "**/*.txt", True),
        ("a.txt", "**/*.txt", True),  # ** takes zero folders too
        ("x/y/z/a.md", "x/**/a.{md,txt}", True),
        ("x/a.rs", "x/a.{md,txt}", False),
        (".env", "*", True),  # dots match, as in the reference server
        ("b1", "[a-c]?", True),
        ("d1", "[!a-c]?", True),
        ("d1", "[^a-c]?", True),
        ("a*b", "a\\*b", True),  # an escaped * is literal
        ("axb", "a\\*b", False),
        ("z", "[z-a]", False),  # an invalid range matches nothing, and is no error
        ("{x}", "{x}", True),  # a brace group without a comma is literal
    ],
)
def test_glob_semantics(relative: str, pattern: str, expected: bool) -> None:
    assert fsmod.glob_match(relative, pattern) is expected


def test_glob_cannot_backtrack_catastrophically() -> None:
    """Stars separated by literals once took exponential time (and held the GIL, stalling every
    other call). Run in a subprocess so a regression fails instead of hanging the suite."""
    code = (
        "from doc_processing_std_tools.filesystem import glob_match; "
        "print(glob_match('a' * 200, '*a*a*a*a*a*a*a*a*a*a*b'), glob_match('a' * 200 + 'b', '*a*a*a*b'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["False", "True"], out.stderr


async def test_bad_glob_patterns_are_tool_errors(client: Client) -> None:
    assert await ok(client, "search_files", path=".", pattern="[z-a]") == "No matches found"
    # {a,b} groups are an alternation inside one regex, never expanded: 2**9 alternatives is fine.
    assert await ok(client, "search_files", path=".", pattern="{a,b}" * 9) == "No matches found"
    huge = "x" * 10_000_000
    message = await fails(client, "search_files", path=".", pattern=huge)
    assert "4,096 characters" in message and len(message) < 1500
    message = await fails(
        client, "search_files", path=".", pattern="*", excludePatterns=["a"] * 300
    )
    assert "the limit is 256" in message
    message = await fails(client, "directory_tree", path=".", excludePatterns=["x" * 5000])
    assert "Invalid excludePatterns" in message and len(message) < 1500
    message = await fails(client, "search_files", path="a/" * 1_000_000, pattern="*")
    assert "the limit is 4,096 below its root" in message and len(message) < 1500


async def test_get_file_info(client: Client, world: dict[str, Path]) -> None:
    os.chmod(world["root"] / "a.txt", 0o640)
    info = dict(
        line.split(": ", 1)
        for line in (await ok(client, "get_file_info", path="a.txt")).splitlines()
    )
    assert info["size"] == "17" and info["isFile"] == "true" and info["isDirectory"] == "false"
    assert info["permissions"] == "640" and info["path"] == str(world["root"] / "a.txt")
    assert {"created", "modified", "accessed"} <= set(info)
    assert "isDirectory: true" in await ok(client, "get_file_info", path="sub")
    linked = await ok(client, "get_file_info", path="rel_link_root2/file2.txt")
    assert f"path: {world['root2'] / 'file2.txt'}" in linked
    assert "No such file" in await fails(client, "get_file_info", path="nope")


async def test_list_allowed_directories(client: Client, world: dict[str, Path]) -> None:
    text = await ok(client, "list_allowed_directories")
    assert text == f"Allowed directories:\n{world['root']}\n{world['root2']}"


# -- writing -------------------------------------------------------------------------------


async def test_write_file(client: Client, world: dict[str, Path]) -> None:
    root = world["root"]
    assert await ok(client, "write_file", path="new.txt", content="héllo") == (
        "Successfully wrote to new.txt"
    )
    assert (root / "new.txt").read_text(encoding="utf-8") == "héllo"
    os.chmod(root / "new.txt", 0o600)
    await ok(client, "write_file", path="new.txt", content="second")
    assert (root / "new.txt").read_text() == "second"
    assert stat.S_IMODE(os.stat(root / "new.txt").st_mode) == 0o600
    await ok(client, "write_file", path=f"{world['root2']}/other.txt", content="2")
    assert (world["root2"] / "other.txt").read_text() == "2"
    assert "Parent directory does not exist" in await fails(
        client, "write_file", path="no/such/dir/f.txt", content="x"
    )
    assert "directory" in await fails(client, "write_file", path="sub", content="x")
    await fails(client, "write_file", path="x.txt")
    assert not [p for p in root.rglob("*") if p.name.startswith(".dpt-tmp-")]


async def test_edit_file_applies_edits_in_order(client: Client, world: dict[str, Path]) -> None:
    target = world["root"] / "code.py"
    target.write_text("def f():\n    return 1\n\n\ndef g():\n    return 2\n")
    diff = await ok(
        client,
        "edit_file",
        path="code.py",
        edits=[
            {"oldText": "return 1", "newText": "return 10"},
            {"oldText": "return 10", "newText": "return 100"},
        ],
    )
    assert diff.startswith("```diff\n") and diff.endswith("```\n\n")
    assert f"--- {target}\toriginal" in diff and f"+++ {target}\tmodified" in diff
    assert "-    return 1\n+    return 100\n" in diff
    assert target.read_text() == "def f():\n    return 100\n\n\ndef g():\n    return 2\n"


async def test_edit_file_failing_edit_changes_nothing(
    client: Client, world: dict[str, Path]
) -> None:
    target = world["root"] / "code.py"
    target.write_text("a = 1\nb = 2\n")
    message = await fails(
        client,
        "edit_file",
        path="code.py",
        edits=[{"oldText": "a = 1", "newText": "a = 5"}, {"oldText": "zzz", "newText": "q"}],
    )
    assert "Could not find exact match" in message and "'zzz'" in message
    assert "\n" not in message  # one line
    message = await fails(
        client, "edit_file", path="code.py", edits=[{"oldText": "x = 1\ny = 2", "newText": "q"}]
    )
    assert "'x = 1\\ny = 2'" in message and "\n" not in message
    assert target.read_text() == "a = 1\nb = 2\n"
    assert "empty" in await fails(
        client, "edit_file", path="code.py", edits=[{"oldText": "", "newText": "x"}]
    )
    await fails(client, "edit_file", path="code.py", edits=[])
    await fails(client, "edit_file", path="code.py", edits=[{"old": "a", "new": "b"}])
    assert "No such file" in await fails(
        client, "edit_file", path="nope.py", edits=[{"oldText": "a", "newText": "b"}]
    )
    (world["root"] / "blob.bin").write_bytes(b"\xff\xfe a")
    assert "UTF-8" in await fails(
        client, "edit_file", path="blob.bin", edits=[{"oldText": "a", "newText": "b"}]
    )


async def test_edit_file_dry_run_writes_nothing(client: Client, world: dict[str, Path]) -> None:
    target = world["root"] / "a.txt"
    diff = await ok(
        client,
        "edit_file",
        path="a.txt",
        edits=[{"oldText": "beta", "newText": "BETA"}],
        dryRun=True,
    )
    assert "-beta\n+BETA\n" in diff
    assert target.read_text() == "alpha\nbeta\ngamma\n"


async def test_edit_file_keeps_crlf(client: Client, world: dict[str, Path]) -> None:
    target = world["root"] / "win.txt"
    target.write_bytes(b"one\r\ntwo\r\nthree\r\n")
    diff = await ok(
        client, "edit_file", path="win.txt", edits=[{"oldText": "two\nthree", "newText": "2\n3"}]
    )
    assert "\r" not in diff and "-two\n-three\n+2\n+3\n" in diff
    assert target.read_bytes() == b"one\r\n2\r\n3\r\n"
    await ok(client, "edit_file", path="win.txt", edits=[{"oldText": "2\r\n", "newText": "II\r\n"}])
    assert target.read_bytes() == b"one\r\nII\r\n3\r\n"


async def test_edit_file_whitespace_flexible_keeps_indentation(
    client: Client, world: dict[str, Path]
) -> None:
    target = world["root"] / "nested.py"
    target.write_text(
        "class A:\n    def f(self):\n        if x:\n            go()\n        done()\n"
    )
    await ok(
        client,
        "edit_file",
        path="nested.py",
        edits=[{"oldText": "if x:\n    go()", "newText": "if y:\n    stop()\n    go()"}],
    )
    assert target.read_text() == (
        "class A:\n    def f(self):\n        if y:\n            stop()\n            go()\n"
        "        done()\n"
    )


async def test_edit_file_diff_fence_outgrows_backticks(
    client: Client, world: dict[str, Path]
) -> None:
    (world["root"] / "doc.md").write_text("```py\nx\n```\n")
    diff = await ok(client, "edit_file", path="doc.md", edits=[{"oldText": "x", "newText": "y"}])
    assert diff.startswith("````diff\n") and diff.endswith("````\n\n")
    (world["root"] / "nonl.txt").write_text("last")
    diff = await ok(
        client, "edit_file", path="nonl.txt", edits=[{"oldText": "last", "newText": "end"}]
    )
    assert "\\ No newline at end of file" in diff


def test_edit_file_matches_without_the_lock_and_rematches_a_changed_file(
    world: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Matching (the slow part) runs with no lock held; the write happens under the locks
    only if the file still holds what was matched, else the edit is matched again."""
    fs = fsmod.FileSystem(Jail([world["root"]]), Settings(roots=[world["root"]]))
    target = world["root"] / "race.txt"
    target.write_text("one\ntwo\n")
    real_apply = fsmod.apply_edit
    held: list[bool] = []

    def apply_and_interfere(text: str, old: str, new: str, *, crlf: bool = False) -> str:
        held.append(locking.PROCESS_LOCK.locked())
        if len(held) == 1:  # another writer changes the file while we match
            target.write_text("zero\none\ntwo\n")
        return real_apply(text, old, new, crlf=crlf)

    monkeypatch.setattr(fs_writes, "apply_edit", apply_and_interfere)
    diff = fs.edit_file("race.txt", [("two", "2")])
    assert target.read_text() == "zero\none\n2\n"  # the other writer's line is kept
    assert held == [False, False] and "+2" in diff

    def always_interfere(text: str, old: str, new: str, *, crlf: bool = False) -> str:
        held.append(locking.PROCESS_LOCK.locked())
        if not locking.PROCESS_LOCK.locked():
            target.write_text(target.read_text() + "x")
        return real_apply(text, old, new, crlf=crlf)

    held.clear()
    monkeypatch.setattr(fs_writes, "apply_edit", always_interfere)
    fs.edit_file("race.txt", [("2", "3")])
    # two optimistic tries lost to the other writer; the last one matched under the lock
    assert held == [False, False, True]
    assert target.read_text() == "zero\none\n3\nxx"  # both writers' changes are kept


def test_edit_file_worst_cases_are_linear() -> None:
    """A 400-line oldText that matches nowhere, a whitespace-flexible match at the end of a
    big file, and one changed line among 200,000 equal ones: the answers (not timed here,
    see benchmarks/filesystem_bounds.py) are right and the diff stays small."""
    lines = [f"    line {i}" for i in range(50_000)]
    text = "\n".join(lines) + "\n"
    with pytest.raises(fsmod.FileSystemError, match="Could not find"):
        fsmod.apply_edit(text, "\n".join(f"nomatch {i}" for i in range(400)), "x")
    old = "\n".join(line.strip() for line in lines[-400:])
    edited = fsmod.apply_edit(text, old, "  new")
    assert edited.endswith("    line 49599\n    new\n")
    repeated = "a\n" * 200_000
    diff = fsmod.unified_diff(repeated, fsmod.apply_edit(repeated, "a", "b"), "f")
    assert len(diff) < 200 and "-a\n+b\n" in diff


async def test_edit_file_refuses_edits_over_the_read_limit(world: dict[str, Path]) -> None:
    settings = Settings(roots=[world["root"]], max_read_bytes=1000)
    async with Client(create_server(settings)) as small:
        message = await fails(
            small, "edit_file", path="a.txt", edits=[{"oldText": "alpha", "newText": "x" * 2000}]
        )
    assert "max_read_bytes=1,000" in message and len(message) < 300
    assert (world["root"] / "a.txt").read_text() == "alpha\nbeta\ngamma\n"


@pytest.mark.slow
async def test_a_chain_as_deep_as_one_call_makes_can_be_listed_and_searched(
    world: dict[str, Path], clean_deep: None
) -> None:
    """create_directory makes 2,000 nested folders in one call; a move nests them deeper
    (2,500). Both tools answer, with no recursion limit; the tree says where it stopped.
    Reply caps large enough for the whole: tests/end_to_end/test_bounded_replies.py has them cut."""
    settings = Settings(
        roots=[world["root"], world["root2"]], max_reply_entries=5_000, max_reply_chars=10**7
    )
    async with Client(create_server(settings)) as client:
        await ok(client, "create_directory", path="deep/" + "d/" * 2000)
        await ok(client, "create_directory", path="top/" + "t/" * 499)
        await ok(client, "move_file", source="deep", destination="top/" + "t/" * 499 + "deep")
        await ok(client, "write_file", path="top/" + "t/" * 499 + "deep/leaf.txt", content="x")
        tree_text = await ok(client, "directory_tree", path="top")
        tree_json, note = tree_text.split("\n\n[", 1)
        node, levels = json.loads(tree_json), 0
        while node:
            levels += 1
            node = node[0].get("children")
        assert levels == fsmod.MAX_TREE_DEPTH
        assert "1 folder(s) at depth 100" in note and "call directory_tree on a deeper path" in note
        found = await ok(client, "search_files", path="top", pattern="**/leaf.txt")
        assert found == str(world["root"] / "top" / ("t/" * 499 + "deep/leaf.txt"))
        assert found in await ok(client, "search_files", path="top", pattern="**/*.txt")
        every = await ok(client, "search_files", path="top", pattern="**/d")
        assert len(every.splitlines()) == 2000


async def test_exclude_patterns_with_many_brace_groups(
    client: Client, world: dict[str, Path]
) -> None:
    """100 patterns of eight {a,b} groups each (256 alternatives apiece) compile to one
    regex; the answer is the same as with the one pattern that matters."""
    root = world["root"] / "sub"
    for name in ("acegikmo", "bdfhjlnp", "keep"):
        (root / name).mkdir()
        (root / name / "f.txt").write_text("x")
    patterns = [f"{{a,b}}{{c,d}}{{e,f}}{{g,h}}{{i,j}}{{k,l}}{{m,n}}{{o,p}}{i}" for i in range(99)]
    patterns.append("{a,b}{c,d}{e,f}{g,h}{i,j}{k,l}{m,n}{o,p}")
    tree = json.loads(await ok(client, "directory_tree", path="sub", excludePatterns=patterns))
    assert sorted(node["name"] for node in tree) == ["deep_link", "keep", "link_up"]
    found = await ok(
        client, "search_files", path="sub", pattern="**/f.txt", excludePatterns=patterns
    )
    assert found == str(root / "keep" / "f.txt")


async def test_create_directory(client: Client, world: dict[str, Path]) -> None:
    assert await ok(client, "create_directory", path="n1/n2/n3") == (
        "Successfully created directory n1/n2/n3"
    )
    assert (world["root"] / "n1" / "n2" / "n3").is_dir()
    await ok(client, "create_directory", path="n1/n2")  # exists: fine
    assert "exists" in await fails(client, "create_directory", path="a.txt")
    assert "Not a directory" in await fails(client, "create_directory", path="a.txt/child")


async def test_move_file(client: Client, world: dict[str, Path]) -> None:
    root, root2 = world["root"], world["root2"]
    assert await ok(client, "move_file", source="victim.txt", destination="sub/v.txt") == (
        "Successfully moved victim.txt to sub/v.txt"
    )
    assert (root / "sub" / "v.txt").read_text() == "victim" and not (root / "victim.txt").exists()
    await ok(client, "move_file", source="sub/v.txt", destination=f"{root2}/v.txt")
    assert (root2 / "v.txt").read_text() == "victim"
    assert "Destination already exists" in await fails(
        client, "move_file", source="a.txt", destination=f"{root2}/file2.txt"
    )
    assert (root2 / "file2.txt").read_text() == "root2 content"
    assert "No such file" in await fails(client, "move_file", source="gone", destination="x")
    assert "Parent directory does not exist" in await fails(
        client, "move_file", source="a.txt", destination="no/where.txt"
    )
    await ok(client, "move_file", source="sub", destination="sub2")
    assert (root / "sub2").is_dir()
    await fails(client, "move_file", source=str(root2), destination="r2")


def test_describe_rows(world: dict[str, Path]) -> None:
    rows = dict(fsmod.describe(Settings(roots=[world["root"]], read_only=True)))
    assert rows == {
        "roots": f"{world['root']} (setting)",
        "mode": "read-only",
        "limits": "read 5242880 bytes, list 10000 entries",
    }


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("write_file", {"path": "locked.txt", "content": "x"}),
        ("edit_file", {"path": "a.txt", "edits": [{"oldText": "alpha", "newText": "A"}]}),
        ("create_directory", {"path": "locked_dir"}),
        ("move_file", {"source": "victim.txt", "destination": "locked.txt"}),
    ],
)
async def test_mutating_tools_hold_the_process_lock(
    client: Client, world: dict[str, Path], tool: str, args: dict[str, Any]
) -> None:
    before = snapshot(world["root"])
    locking.PROCESS_LOCK.acquire()
    try:
        task = asyncio.create_task(client.call_tool(tool, args, raise_on_error=False))
        async with asyncio.timeout(10):
            while not locking.PROCESS_LOCK.waiting():  # the call has reached the lock
                await asyncio.sleep(0.01)
        assert not task.done()
        assert snapshot(world["root"]) == before
    finally:
        locking.PROCESS_LOCK.release()
    result = await asyncio.wait_for(task, 10)
    assert not result.is_error
    assert snapshot(world["root"]) != before


# -- settings, lazy export, stdio ----------------------------------------------------


def test_settings_roots(world: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings.model_validate(
        {"roots": ["root", "root2"]}, context={"base_dir": world["base"]}
    )
    assert settings.roots == [world["root"], world["root2"]]
    assert settings.read_only is False
    assert settings.max_read_bytes == 5 * 1024 * 1024 and settings.max_entries == 10_000
    monkeypatch.setenv(fsmod.ROOTS_ENV, f"{world['root']}{os.pathsep}{world['root2']}")
    assert Settings().roots == [world["root"], world["root2"]]
    assert fsmod.fixed_roots(Settings())[:2] == ("variable", [world["root"], world["root2"]])
    monkeypatch.delenv(fsmod.ROOTS_ENV)
    monkeypatch.chdir(world["root2"])
    # The working directory is not a setting: it is chosen when the server is built,
    # after the client's roots.
    assert Settings().roots == []
    assert fsmod.fixed_roots(Settings()) == ("working directory", [world["root2"]], None)
    assert fsmod.fixed_roots(Settings(roots=[world["root"]]))[0] == "setting"
    with pytest.raises(ValidationError) as info:
        Settings.model_validate({"roots": ["missing"]}, context={"base_dir": world["base"]})
    assert "roots" in str(info.value) and "does not exist" in str(info.value)
    with pytest.raises(ValidationError, match="roots"):
        Settings(roots=[world["root"] / "a.txt"])
    with pytest.raises(ValidationError, match="roots"):
        Settings(roots=[])
    with pytest.raises(ValidationError):
        Settings(roots=[world["root"]], unknown=1)
    with pytest.raises(ValueError, match="roots"):
        create_server(Settings.model_construct(roots=[world["base"] / "gone"]))


def test_check_and_describe_say_where_roots_come_from(
    world: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(fsmod.ROOTS_ENV, raising=False)
    monkeypatch.chdir("/")
    [(level, message)] = fsmod.check(Settings())
    assert level == "WARN" and "no root yet" in message and "filesystem root" in message
    assert "the client's roots will be used if it sends them" in message
    assert dict(fsmod.describe(Settings()))["roots"].startswith("none yet")
    monkeypatch.chdir(world["root"])
    assert fsmod.check(Settings()) == []
    assert dict(fsmod.describe(Settings()))["roots"] == (
        f"the client's roots when it sends them, else the working directory {world['root']}"
    )
    monkeypatch.setenv(fsmod.ROOTS_ENV, str(world["root2"]))
    assert (
        dict(fsmod.describe(Settings()))["roots"]
        == f"{world['root2']} (variable $DPTTOOLS_FS_ROOTS)"
    )
    assert fsmod.check(Settings(roots=[world["root"]])) == []


async def test_no_roots_from_the_filesystem_root(
    world: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # fastmcp's in-memory client sends no roots: nothing is allowed, every path refused
    monkeypatch.delenv(fsmod.ROOTS_ENV, raising=False)
    monkeypatch.chdir("/")
    server = create_server(Settings())
    assert "none are allowed until it does" in (server.instructions or "")
    async with Client(server) as c:
        listing = await ok(c, "list_allowed_directories")
        assert listing.startswith("No directory is allowed yet.")
        fix = listing.splitlines()[-1]
        assert await fails(c, "read_text_file", path="/etc/hostname") == fix
        assert await fails(c, "write_file", path="x.txt", content="x") == fix
    assert not Path("/x.txt").exists()


async def test_a_project_working_directory_is_the_last_resort(
    world: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(fsmod.ROOTS_ENV, raising=False)
    monkeypatch.chdir(world["root"])
    async with Client(create_server(Settings())) as c:
        assert str(world["root"]) in await ok(c, "list_allowed_directories")
        assert await ok(c, "read_text_file", path="a.txt", head=1) == "alpha"


async def test_relative_tool_paths_use_the_first_root(world: dict[str, Path]) -> None:
    async with Client(create_server(Settings(roots=[world["root2"], world["root"]]))) as c:
        assert await ok(c, "read_text_file", path="file2.txt") == "root2 content"


def test_lazy_module_export(world: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(fsmod.ROOTS_ENV, str(world["root"]))
    cached = fsmod.__dict__.pop("filesystem_server", None)
    try:
        server = fsmod.filesystem_server
        assert isinstance(server, FastMCP) and server.name == "filesystem"
        assert fsmod.filesystem_server is server
    finally:
        fsmod.__dict__.pop("filesystem_server", None)
        if cached is not None:
            fsmod.filesystem_server = cached
    with pytest.raises(AttributeError):
        fsmod.no_such_attribute  # noqa: B018


async def test_runs_alone_over_stdio(world: dict[str, Path]) -> None:
    from fastmcp.client.transports import StdioTransport

    transport = StdioTransport(
        sys.executable,
        ["-m", "doc_processing_std_tools.filesystem"],
        env={**os.environ, fsmod.ROOTS_ENV: str(world["root"]), "FASTMCP_LOG_LEVEL": "WARNING"},
        keep_alive=False,
    )
    async with Client(transport) as c:
        names = {tool.name for tool in await c.list_tools()}
        assert names == READ_TOOLS | WRITE_TOOLS
        assert await ok(c, "read_text_file", path="a.txt", head=1) == "alpha"


# -- mounted beside memory-tools ---------------------------------------------------------


async def test_mounted_with_memory_tools(
    world: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = pytest.importorskip("doc_processing_std_tools.memory")
    store = world["base"] / "memstore"
    store.mkdir()
    monkeypatch.chdir(store)
    fs_server = create_server(Settings(roots=[world["root"]]))
    mem_server = memory.create_server(
        memory.Settings.model_validate({}, context={"base_dir": store})
    )
    mem_names = {tool.name for tool in await mem_server.list_tools()}
    assert mem_names and not mem_names & (READ_TOOLS | WRITE_TOOLS)
    parent = FastMCP("both")
    parent.mount(fs_server)
    parent.mount(mem_server)
    names = [tool.name for tool in await parent.list_tools()]
    assert len(names) == len(set(names)), names
    assert set(names) == READ_TOOLS | WRITE_TOOLS | mem_names
    async with Client(parent) as c:
        assert await ok(c, "read_text_file", path="a.txt", head=1) == "alpha"
        for tool in await mem_server.list_tools():
            hints = tool.annotations
            if hints and hints.read_only_hint and not tool.parameters.get("required"):
                await ok(c, tool.name)
                break


# -- the adversarial containment suite --------------------------------------------------

DENY, CONTAINED, ALLOW, BROKEN = "deny", "contained", "allow", "broken"

CASES: list[tuple[str, str]] = [
    # prefix siblings
    ("{evil}/secret.txt", DENY),
    ("{evil}", DENY),
    ("{root}-evil/secret.txt", DENY),
    ("{root}-evil/../root-evil/secret.txt", DENY),
    # ".." in every position
    ("..", DENY),
    ("../outside/secret.txt", DENY),
    ("./../outside/secret.txt", DENY),
    ("sub/../../outside/secret.txt", DENY),
    ("sub/./../.././outside/secret.txt", DENY),
    ("sub/../sub/../../outside/secret.txt", DENY),
    ("{root}/../outside/secret.txt", DENY),
    ("{root}/sub/../../outside/secret.txt", DENY),
    ("{root}//../outside/secret.txt", DENY),
    ("{root}/./../outside/secret.txt", DENY),
    ("{root2}/../outside/secret.txt", DENY),
    ("{root2}/../root-evil/secret.txt", DENY),
    ("../../../../../../../etc/passwd", DENY),
    # absolute paths outside
    ("{out}/secret.txt", DENY),
    ("{out}", DENY),
    ("/etc/passwd", DENY),
    ("/", DENY),
    ("/{out}/secret.txt", DENY),  # "//" prefix
    ("///{out}/secret.txt", DENY),
    # home
    ("~", DENY),
    ("~/secret.txt", DENY),
    ("~/../outside/secret.txt", DENY),
    # NUL bytes
    ("secret.txt\x00", DENY),
    ("\x00", DENY),
    ("{out}/secret.txt\x00.txt", DENY),
    ("a.txt\x00/../../outside/secret.txt", DENY),
    # symlinks leaving the roots: last component, folder on the way, chains
    ("link_file_out", DENY),
    ("link_dir_out", DENY),
    ("link_dir_out/secret.txt", DENY),
    ("link_dir_out/inner/secret.txt", DENY),
    ("chain1", DENY),
    ("chain_dir1/secret.txt", DENY),
    ("rel_link_out/secret.txt", DENY),
    ("sub/deep_link/secret.txt", DENY),
    ("sub/link_up/outside/secret.txt", DENY),
    ("link_evil/secret.txt", DENY),
    ("link_parent/outside/secret.txt", DENY),
    ("link_parent", DENY),
    ("link_abs_dotdot/secret.txt", DENY),
    ("link_inner_chain/secret.txt", DENY),
    ("{root2}/link_out/secret.txt", DENY),
    # dangling symlinks out of the roots: writes must not create the target
    ("dangling_out", DENY),
    ("dangling_out_dir/new.txt", DENY),
    ("loop1", BROKEN),
    # harmless look-alikes: literal names inside the root
    ("..\\outside\\secret.txt", CONTAINED),
    ("sub\\..\\..\\outside\\secret.txt", CONTAINED),
    ("C:\\outside\\secret.txt", CONTAINED),
    ("\u2025/outside/secret.txt", CONTAINED),
    ("\uff0e\uff0e/outside/secret.txt", CONTAINED),
    ("..\uff0foutside\uff0fsecret.txt", CONTAINED),
    ("\u2024\u2024/outside/secret.txt", CONTAINED),
    ("~root/secret.txt", CONTAINED),
    ("...", CONTAINED),
    (" ../outside/secret.txt", CONTAINED),
    ("dangling_in", CONTAINED),
    # symlinks between roots are allowed
    ("link_to_root2/file2.txt", ALLOW),
    ("rel_link_root2/file2.txt", ALLOW),
    ("{root}/rel_link_root2/../root2/file2.txt", ALLOW),
]


def everything_in(content: list[Any]) -> str:
    """The decoded bytes of every image, audio or blob block (latin-1, so any byte maps)."""
    out = []
    for block in content:
        data = getattr(block, "data", None) or getattr(
            getattr(block, "resource", None), "blob", None
        )
        if data:
            out.append(base64.b64decode(data).decode("latin-1"))
    return "".join(out)


def calls_for(path: str) -> list[tuple[str, dict[str, Any]]]:
    """Every path-taking tool on *path* (moves last: they may rename the path away)."""
    return [
        ("read_text_file", {"path": path}),
        ("read_text_file", {"path": path, "head": 1}),
        ("read_text_file", {"path": path, "tail": 1}),
        ("read_file", {"path": path}),
        ("read_media_file", {"path": path}),
        ("read_multiple_files", {"paths": [path]}),
        ("get_file_info", {"path": path}),
        ("list_directory", {"path": path}),
        ("list_directory_with_sizes", {"path": path}),
        ("directory_tree", {"path": path}),
        ("search_files", {"path": path, "pattern": "**"}),
        (
            "edit_file",
            {"path": path, "edits": [{"oldText": "TOP-", "newText": "PWNED-"}], "dryRun": True},
        ),
        ("edit_file", {"path": path, "edits": [{"oldText": "TOP-", "newText": "PWNED-"}]}),
        ("write_file", {"path": path, "content": "PWNED"}),
        ("create_directory", {"path": path}),
        ("create_directory", {"path": f"{path}/newdir/deeper"}),
        ("write_file", {"path": f"{path}/planted.txt", "content": "PWNED"}),
        ("move_file", {"source": "victim.txt", "destination": path}),
        ("move_file", {"source": path, "destination": "stolen"}),
    ]


def test_the_suite_is_big_enough() -> None:
    assert len(CASES) >= 40
    assert {kind for _, kind in CASES} == {DENY, CONTAINED, ALLOW, BROKEN}


@pytest.mark.parametrize(("template", "kind"), CASES, ids=[repr(c[0]) for c in CASES])
async def test_containment_against_every_tool(
    client: Client, world: dict[str, Path], template: str, kind: str
) -> None:
    path = template.format(
        root=world["root"], root2=world["root2"], out=world["out"], evil=world["evil"]
    )
    before = outside_state(world)
    passwd = Path("/etc/passwd").read_bytes() if Path("/etc/passwd").exists() else b""
    if kind == ALLOW:
        assert await ok(client, "read_text_file", path=path) == "root2 content"
    for tool, args in calls_for(path):
        error, text, content = await call(client, tool, **args)
        seen = text + everything_in(content)
        assert SECRET not in seen, (tool, args)
        if passwd:
            assert "root:x:0" not in seen, (tool, args)
        assert "Traceback" not in text
        if kind not in (DENY, BROKEN) or args.get("source") == path:
            continue  # moving a symlink itself (never its target) is allowed
        if tool == "read_multiple_files":
            assert "Error - " in text, (tool, text)
            continue
        assert error, (tool, args, text)
        if kind == DENY and "\x00" not in path and tool != "move_file":
            assert "Access denied" in text, (tool, args, text)
    assert outside_state(world) == before


@pytest.mark.parametrize("template", ["link_to_root2/file2.txt", "rel_link_root2/file2.txt"])
async def test_symlink_into_another_root_is_allowed(
    client: Client, world: dict[str, Path], template: str
) -> None:
    assert await ok(client, "read_text_file", path=template) == "root2 content"
    await ok(client, "write_file", path=template, content="changed")
    assert (world["root2"] / "file2.txt").read_text() == "changed"
    await ok(client, "create_directory", path=template.replace("file2.txt", "made"))
    assert (world["root2"] / "made").is_dir()


async def test_nul_byte_message_is_readable(client: Client) -> None:
    assert "NUL" in await fails(client, "read_text_file", path="a.txt\x00")


async def test_denial_names_the_path_and_the_roots(client: Client, world: dict[str, Path]) -> None:
    message = await fails(client, "read_text_file", path=f"{world['out']}/secret.txt")
    assert message == (
        f"Access denied - path outside allowed directories: {world['out']}/secret.txt not in "
        f"{world['root']}, {world['root2']}"
    )
    message = await fails(client, "read_text_file", path="link_file_out")
    assert message.startswith("Access denied - symlink target outside allowed directories")


async def test_listings_and_searches_never_follow_symlinks_out(
    client: Client, world: dict[str, Path]
) -> None:
    before = outside_state(world)
    tree = await ok(client, "directory_tree", path=".")
    assert '"secret.txt"' not in tree
    assert '"inner"' not in tree
    found = await ok(client, "search_files", path=".", pattern="**/secret.txt")
    assert found == "No matches found"
    found = await ok(client, "search_files", path=str(world["root2"]), pattern="**")
    assert "secret" not in found
    sizes = await ok(client, "list_directory_with_sizes", path="link_to_root2")
    assert "file2.txt" in sizes
    assert outside_state(world) == before


async def test_race_swapping_a_folder_for_an_outside_symlink(
    client: Client, world: dict[str, Path]
) -> None:
    swap, link = swap_pair(world["root"], world["out"], "inside-x", f"{SECRET}-outside")
    before = outside_state(world)
    denied = done = 0
    with swapping(swap, link):
        deadline = time.monotonic() + 1.5
        i = 0
        while time.monotonic() < deadline or not (denied and done):
            i += 1
            for tool, args in (
                ("write_file", {"path": f"swap/w{i}.txt", "content": "PWNED"}),
                ("create_directory", {"path": f"swap/d{i}/x"}),
                ("edit_file", {"path": "swap/e.txt", "edits": [{"oldText": "-", "newText": "+"}]}),
                ("edit_file", {"path": "swap/e.txt", "edits": [{"oldText": "+", "newText": "-"}]}),
                ("move_file", {"source": "victim.txt", "destination": f"swap/v{i}.txt"}),
                ("move_file", {"source": f"swap/v{i}.txt", "destination": "victim.txt"}),
                ("read_text_file", {"path": "swap/e.txt"}),
                ("list_directory", {"path": "swap"}),
            ):
                error, text, _ = await call(client, tool, **args)
                assert SECRET not in text, (tool, text)
                if error and "Access denied" in text:
                    denied += 1
                elif not error:
                    done += 1
            if time.monotonic() > deadline + 15:
                break
    assert denied and done, (denied, done)
    assert outside_state(world) == before


async def test_write_tools_work_through_the_launcher_composition(world: dict[str, Path]) -> None:
    compose = pytest.importorskip("doc_processing_std_tools.launcher.compose")
    from doc_processing_std_tools.launcher.config import load_config

    config = world["base"] / "tools.yaml"
    config.write_text("servers:\n  filesystem:\n    settings:\n      roots: [root]\n")
    composition = await compose.compose(load_config(config))
    assert "write_file" in composition.mounts[0].locked  # by the tool itself, for its write
    async with Client(composition.root) as c:
        with anyio_fail_after(10):  # a launcher lock around our own lock would deadlock
            await ok(c, "write_file", path="via_launcher.txt", content="ok")
            await ok(c, "edit_file", path="a.txt", edits=[{"oldText": "alpha", "newText": "A"}])
    assert (world["root"] / "via_launcher.txt").read_text() == "ok"
    assert (world["root"] / "a.txt").read_text().startswith("A\n")


@pytest.mark.slow
def test_building_the_server_does_not_import_re2_or_griffe(tmp_path: Path) -> None:
    """RE2 is needed only when a call brings a glob; griffe only for docstrings fastmcp
    must parse: neither belongs on the start-up path."""
    code = (
        "import sys; from doc_processing_std_tools.filesystem import Settings, create_server; "
        f"create_server(Settings(roots=[{str(tmp_path)!r}])); "
        "print(sorted(m for m in ('re2', 'griffe') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
