"""Tests of the memory-tools server, mostly through an in-memory MCP client."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from fastmcp import Client
from hypothesis import given
from hypothesis import strategies as st

from doc_processing_std_tools import memory
from doc_processing_std_tools.memory import (
    MemoryStore,
    MemoryStoreError,
    Settings,
    create_server,
    formats,
)
from helpers.memory_files import FolderFiles, RedisFiles

ALL_TOOLS = {
    "write_memory",
    "read_memory",
    "search_memory",
    "list_memory_keys",
    "delete_memory",
    "memory_view",
    "memory_create",
    "memory_str_replace",
    "memory_insert",
    "memory_delete",
    "memory_rename",
}
READ_ONLY = {"read_memory", "search_memory", "list_memory_keys", "memory_view"}
DESTRUCTIVE = {
    "write_memory",
    "delete_memory",
    "memory_str_replace",
    "memory_delete",
    "memory_rename",
}


# -- fixtures and helpers -------------------------------------------------------


@pytest.fixture
def mem(tmp_path: Path) -> Path:
    return tmp_path / "mem"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder beside the memory directory that no tool may touch."""
    out = tmp_path / "outside"
    (out / "dir").mkdir(parents=True)
    (out / "secret.txt").write_text("top secret\n")
    (out / "dir" / "inner.txt").write_text("inner\n")
    (out / "data.json").write_text(json.dumps({"key": "data", "value": "outside value"}))
    return out


@pytest.fixture
def settings(memory_backend: dict) -> Settings:
    return Settings(**memory_backend)


@pytest.fixture
def files(memory_backend: dict, mem: Path) -> FolderFiles:
    """The store's content, whichever the backend (see conftest's ``memory_backend``)."""
    if memory_backend.get("backend") == "redis":
        return RedisFiles(str(memory_backend["url"]), str(memory_backend["namespace"]))
    return FolderFiles(mem)


@pytest.fixture
def store(settings: Settings):
    """The store the tools use, without MCP: a MemoryStore or a RedisMemoryStore."""
    from doc_processing_std_tools.memory.stores import open_store

    return open_store(settings)


@pytest.fixture
async def client(settings: Settings):
    async with Client(create_server(settings)) as c:
        yield c


async def call(client: Client, tool: str, **args) -> tuple[bool, str]:
    result = await client.call_tool(tool, args, raise_on_error=False)
    text = "\n".join(block.text for block in result.content if hasattr(block, "text"))
    assert "Traceback" not in text
    return result.is_error, text


async def ok(client: Client, tool: str, **args) -> str:
    is_error, text = await call(client, tool, **args)
    assert not is_error, text
    return text


async def err(client: Client, tool: str, **args) -> str:
    is_error, text = await call(client, tool, **args)
    assert is_error, text
    return text


def snapshot(folder: Path) -> dict[str, tuple[bytes | None, int]]:
    """Every item below *folder*: (content of files, mtime_ns)."""
    items: dict[str, tuple[bytes | None, int]] = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            info = path.lstat()
            content = path.read_bytes() if path.is_file() and not path.is_symlink() else None
            items[str(path.relative_to(folder))] = (content, info.st_mtime_ns)
    return items


# -- settings and module contract -----------------------------------------------


def test_settings_default_from_env_and_cwd(monkeypatch, tmp_path: Path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DPTTOOLS_MEMORY_DIR", raising=False)
    assert Settings().memory_dir == tmp_path / "agent_memory"
    monkeypatch.setenv("DPTTOOLS_MEMORY_DIR", "rel/mem")
    assert Settings().memory_dir == tmp_path / "rel" / "mem"


@pytest.mark.parametrize("where", ["root", "home"])
def test_settings_default_outside_a_project(monkeypatch, tmp_path: Path, where: str):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.delenv("DPTTOOLS_MEMORY_DIR", raising=False)
    monkeypatch.chdir("/" if where == "root" else home)
    settings = Settings()
    assert settings.memory_dir == tmp_path / "data" / "doc-processing-std-tools" / "agent_memory"
    assert settings.follows_client_roots
    assert "client's first root" in dict(memory.describe(settings))["memory_dir"]
    assert f"else {settings.memory_dir}" in memory.instructions(settings)
    assert memory.check(settings) == []
    assert not (tmp_path / "data").exists() and not (home / "agent_memory").exists()
    monkeypatch.setenv("DPTTOOLS_MEMORY_DIR", str(tmp_path / "mem"))
    assert Settings().source == "variable" and not Settings().follows_client_roots
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DPTTOOLS_MEMORY_DIR")
    assert Settings().source == "working directory"
    assert Settings(memory_dir=tmp_path / "x").source == "setting"


def test_check_fails_on_an_unusable_memory_folder(tmp_path: Path):
    (tmp_path / "afile").write_text("x")
    [(level, message)] = memory.check(Settings(memory_dir=tmp_path / "afile" / "mem"))
    assert level == "FAIL"
    assert "is not a folder" in message and "DPTTOOLS_MEMORY_DIR" in message
    assert memory.check(Settings(memory_dir=tmp_path / "new" / "mem")) == []
    assert not (tmp_path / "new").exists()


def test_settings_config_value_resolves_against_base_dir(tmp_path: Path):
    config_dir = tmp_path / "conf"
    settings = Settings.model_validate({"memory_dir": "m"}, context={"base_dir": config_dir})
    assert settings.memory_dir == config_dir / "m"
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ValueError, match="not a folder"):
        Settings(memory_dir=tmp_path / "afile")
    with pytest.raises(ValueError, match="extra"):
        Settings.model_validate({"memory_dir": "m", "bogus": 1})
    with pytest.raises(ValueError, match="empty"):
        Settings.model_validate({"memory_dir": ""})


def test_describe_for_check(tmp_path: Path):
    rows = memory.describe(Settings(memory_dir=tmp_path / "m"))
    assert rows == [
        ("memory_dir", f"{tmp_path / 'm'} (created on first use)"),
        ("memory from", "setting"),
    ]
    assert not (tmp_path / "m").exists()
    assert "(exists)" in memory.describe(Settings(memory_dir=tmp_path))[0][1]


def test_lazy_memory_server_is_cached(monkeypatch, tmp_path: Path):
    from fastmcp import FastMCP

    monkeypatch.setenv("DPTTOOLS_MEMORY_DIR", str(tmp_path / "lazy"))
    monkeypatch.delitem(memory.__dict__, "memory_server", raising=False)
    try:
        server = memory.memory_server
        assert isinstance(server, FastMCP)
        assert server.name == "memory-tools"
        assert memory.memory_server is server
    finally:
        memory.__dict__.pop("memory_server", None)
    with pytest.raises(AttributeError):
        _ = memory.no_such_thing


async def test_tools_annotations_descriptions_and_instructions(client: Client, settings: Settings):
    assert "<key>.json" in (create_server(settings).instructions or "")
    tools = {tool.name: tool for tool in await client.list_tools()}
    assert set(tools) == ALL_TOOLS
    for name, tool in tools.items():
        assert tool.description and len(tool.description) > 40, name
        assert tool.output_schema is None, name
        notes = tool.annotations
        assert notes is not None, name
        assert notes.open_world_hint is False, name
        assert notes.read_only_hint is (name in READ_ONLY), name
        assert notes.destructive_hint is (name in DESTRUCTIVE), name
        assert notes.idempotent_hint is not None, name
        for param, schema in tool.input_schema["properties"].items():
            assert schema.get("description"), f"{name}.{param} has no description"
    assert tools["memory_create"].annotations.destructive_hint is False
    assert tools["write_memory"].annotations.idempotent_hint is True
    assert tools["memory_insert"].annotations.idempotent_hint is False


# -- key-value tools ------------------------------------------------------------


async def test_write_read_overwrite_and_creates_directory(client: Client, files: FolderFiles):
    assert files.files() == {}
    assert "saved" in await ok(client, "write_memory", key="color", value="blue")
    assert json.loads(files.read_text("color.json")) == {"key": "color", "value": "blue"}
    assert await ok(client, "read_memory", key="color") == "blue"
    assert "replaced" in await ok(client, "write_memory", key="color", value="green")
    assert await ok(client, "read_memory", key="color") == "green"
    assert "No memory stored under key 'nope'" in await err(client, "read_memory", key="nope")


async def test_list_search_and_delete(client: Client):
    await ok(client, "write_memory", key="Fruit", value="Apple pie")
    await ok(client, "write_memory", key="veg", value="carrot")
    await ok(client, "write_memory", key="drink", value="apple juice")
    assert json.loads(await ok(client, "list_memory_keys")) == ["Fruit", "drink", "veg"]
    found = json.loads(await ok(client, "search_memory", query="APPLE"))
    assert found == [
        {"key": "Fruit", "value": "Apple pie"},
        {"key": "drink", "value": "apple juice"},
    ]
    assert json.loads(await ok(client, "search_memory", query="fRuIt")) == [
        {"key": "Fruit", "value": "Apple pie"}
    ]
    assert json.loads(await ok(client, "search_memory", query="zzz")) == []
    assert len(json.loads(await ok(client, "search_memory", query=""))) == 3
    assert "deleted" in await ok(client, "delete_memory", key="veg")
    assert json.loads(await ok(client, "list_memory_keys")) == ["Fruit", "drink"]
    assert "No memory stored under key 'veg'" in await err(client, "delete_memory", key="veg")


async def test_empty_store_lists_nothing(client: Client):
    assert json.loads(await ok(client, "list_memory_keys")) == []
    assert json.loads(await ok(client, "search_memory", query="x")) == []


async def test_key_flattening(client: Client, files: FolderFiles):
    await ok(client, "write_memory", key="a/b", value="one")
    assert files.exists("a_b.json") and not files.exists("a")
    assert json.loads(await ok(client, "list_memory_keys")) == ["a/b"]
    assert await ok(client, "read_memory", key="a_b") == "one"
    assert await ok(client, "read_memory", key="a\\b") == "one"
    text = await ok(client, "write_memory", key="a\\b", value="two")
    assert "'a/b'" in text  # says which key's value it replaced
    assert await ok(client, "read_memory", key="a/b") == "two"
    assert json.loads(await ok(client, "list_memory_keys")) == ["a\\b"]
    await ok(client, "delete_memory", key="a/b")
    assert json.loads(await ok(client, "list_memory_keys")) == []


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("", "must not be empty"),
        (".", "cannot start with '.'"),
        ("..", "cannot start with '.'"),
        (".hidden", "cannot start with '.'"),
        ("..\\x", "cannot start with '.'"),
        ("a\x00b", "NUL"),
        ("k" * 196, "limit is 200 bytes"),
        ("é" * 98, "limit is 200 bytes"),
    ],
)
async def test_invalid_keys(client: Client, files: FolderFiles, key: str, message: str):
    assert message in await err(client, "write_memory", key=key, value="v")
    assert message in await err(client, "read_memory", key=key)
    assert message in await err(client, "delete_memory", key=key)
    assert not any(name.endswith(".json") for name in files.files())


async def test_longest_key_accepted(client: Client):
    key = "k" * 195  # 195 + len(".json") == 200 bytes
    await ok(client, "write_memory", key=key, value="v")
    assert json.loads(await ok(client, "list_memory_keys")) == [key]


async def test_values_must_be_strings(client: Client, files: FolderFiles):
    for bad in (123, ["a"], {"a": 1}, None, True):
        await err(client, "write_memory", key="k", value=bad)
    await err(client, "write_memory", key=5, value="v")
    assert not files.exists("k.json")


async def test_large_value_round_trips_untruncated(client: Client):
    value = ("0123456789abcdef" * 65536) + "END"  # just over 1 MB
    await ok(client, "write_memory", key="big", value=value)
    assert await ok(client, "read_memory", key="big") == value
    # Over MAX_INDEXED_BYTES (1 MiB): matched by key only, listed without its value.
    assert json.loads(await ok(client, "search_memory", query="end")) == []
    found = json.loads(await ok(client, "search_memory", query="BIG"))
    size = len(formats._encode_json({"key": "big", "value": value}))
    assert found == [{"key": "big", "value": None, "size": size}]
    assert json.loads(await ok(client, "list_memory_keys")) == ["big"]
    below = "x" * (memory.MAX_INDEXED_BYTES - 100) + "END"
    await ok(client, "write_memory", key="below", value=below)
    found = json.loads(await ok(client, "search_memory", query="end"))
    # found by its value, but too large for a reply (max_reply_chars): listed by its size
    assert found == [{"key": "below", "value": None, "size": len(below)}]


async def test_unicode_values(client: Client, files: FolderFiles):
    value = 'naïve ☃ 日本語\nsecond line\ttab \\ "quoted"'
    await ok(client, "write_memory", key="ünï", value=value)
    assert await ok(client, "read_memory", key="ünï") == value
    assert "☃" in files.read_text("ünï.json")


# -- the shared folder ------------------------------------------------------------


async def test_file_made_by_memory_create_is_a_key(client: Client):
    await ok(client, "memory_create", path="/notes.json", file_text="plain notes, not json\n")
    await ok(client, "memory_create", path="/readme.md", file_text="not a key")
    await ok(client, "memory_create", path="/sub/nested.json", file_text="{}")
    assert json.loads(await ok(client, "list_memory_keys")) == ["notes"]
    assert await ok(client, "read_memory", key="notes") == "plain notes, not json\n"
    assert json.loads(await ok(client, "search_memory", query="NOT JSON")) == [
        {"key": "notes", "value": "plain notes, not json\n"}
    ]
    # And the other way round: a key is a file for the file tools.
    await ok(client, "write_memory", key="todo", value="buy milk")
    assert '"value": "buy milk"' in await ok(client, "memory_view", path="/todo.json")
    await ok(client, "memory_str_replace", path="todo.json", old_str="milk", new_str="bread")
    assert await ok(client, "read_memory", key="todo") == "buy bread"
    await ok(client, "memory_delete", path="/todo.json")
    assert "No memory stored" in await err(client, "read_memory", key="todo")


async def test_malformed_and_binary_json_files_never_crash(client: Client, files: FolderFiles):
    files.write_text("broken.json", '{"key": "broken", "value": ')
    files.write_text("other.json", '{"key": "other", "value": 5}')
    files.write_text("renamed.json", '{"key": "original", "value": "kept"}')
    files.write_text("deep.json", "[" * 100_000)
    files.write_bytes("binary.json", b"\xff\xfe\x00binary")
    files.mkdir("adir.json")
    keys = json.loads(await ok(client, "list_memory_keys"))
    assert keys == ["binary", "broken", "deep", "other", "renamed"]
    assert await ok(client, "read_memory", key="broken") == '{"key": "broken", "value": '
    assert await ok(client, "read_memory", key="other") == '{"key": "other", "value": 5}'
    # a stored key that no longer matches its file name is reported under the file name
    assert await ok(client, "read_memory", key="renamed") == "kept"
    assert "not UTF-8" in await err(client, "read_memory", key="binary")
    assert "folder" in await err(client, "write_memory", key="adir", value="x")
    page = json.loads(await ok(client, "search_memory", query=""))  # deep's 100,000 characters
    rest = json.loads(await ok(client, "search_memory", query="", offset=page["next_offset"]))
    found = [item["key"] for item in page["results"] + rest]
    assert found == ["broken", "deep", "other", "renamed"]  # the binary file is skipped
    assert "not UTF-8" in await err(client, "memory_view", path="binary.json")


@pytest.mark.folder_only("the lock file and the temp files of atomic writes")
async def test_lock_and_temp_files_never_listed(client: Client, mem: Path, files: FolderFiles):
    await ok(client, "write_memory", key="k", value="v")
    assert files.exists(".dpt.lock")  # the mutating tool took the file lock
    files.write_text(".dpt-tmp-0123.json", '{"key": "tmp", "value": "v"}')
    files.write_text(".hidden.json", '{"key": "hidden", "value": "v"}')
    files.mkdir(".hiddendir")
    files.write_text(".hiddendir/x.txt", "x")
    assert json.loads(await ok(client, "list_memory_keys")) == ["k"]
    assert [r["key"] for r in json.loads(await ok(client, "search_memory", query=""))] == ["k"]
    listing = (await ok(client, "memory_view", path="/")).splitlines()[1:]
    assert listing[1:] == ["33B\t/k.json"]
    # nothing is left behind by atomic writes
    assert sorted(p.name for p in mem.iterdir() if p.name.startswith(".dpt-tmp-")) == [
        ".dpt-tmp-0123.json"
    ]


@pytest.mark.parametrize("path", [".dpt.lock", "/.dpt-tmp-x", "sub/.dpt-tmp-y", ".dpt"])
async def test_reserved_names_refused(client: Client, mem: Path, files: FolderFiles, path: str):
    await ok(client, "write_memory", key="k", value="v")
    folder = files.backend == "folder"
    lock_inode = (mem / ".dpt.lock").stat().st_ino if folder else 0
    assert "reserved" in await err(client, "memory_view", path=path)
    assert "reserved" in await err(client, "memory_create", path=path, file_text="x")
    assert "reserved" in await err(
        client, "memory_insert", path=path, insert_line=0, insert_text="x"
    )
    assert "reserved" in await err(
        client, "memory_str_replace", path=path, old_str="a", new_str="b"
    )
    assert "reserved" in await err(client, "memory_delete", path=path)
    assert "reserved" in await err(client, "memory_rename", old_path="k.json", new_path=path)
    assert not folder or (mem / ".dpt.lock").stat().st_ino == lock_inode
    assert files.exists("k.json")


# -- file tools -------------------------------------------------------------------


async def test_view_directory_two_levels_with_sizes(client: Client):
    await ok(client, "memory_create", path="a.txt", file_text="x" * 2048)
    await ok(client, "memory_create", path="d1/b.txt", file_text="hi")
    await ok(client, "memory_create", path="d1/d2/too_deep.txt", file_text="deep")
    text = await ok(client, "memory_view", path="/")
    lines = text.splitlines()
    assert lines[0] == (
        "Here're the files and directories up to 2 levels deep in /, excluding hidden items:"
    )
    assert lines[1].endswith("\t/")
    assert "2K\t/a.txt" in lines
    assert "2B\t/d1/b.txt" in lines
    assert any(line.endswith("\t/d1/") for line in lines)
    assert any(line.endswith("\t/d1/d2/") for line in lines)
    assert "too_deep" not in text
    sub = await ok(client, "memory_view", path="d1")
    assert "in /d1," in sub and "2B\t/d1/b.txt" in sub and "4B\t/d1/d2/too_deep.txt" in sub
    assert await ok(client, "memory_view", path="") == text
    assert "not allowed" in await err(client, "memory_view", path="/", view_range=[1, 2])


async def test_view_file_and_ranges(client: Client):
    await ok(client, "memory_create", path="f.txt", file_text="one\ntwo\nthree\nfour\n")
    text = await ok(client, "memory_view", path="/f.txt")
    assert text == (
        "Here's the content of /f.txt with line numbers:\n"
        "     1\tone\n     2\ttwo\n     3\tthree\n     4\tfour"
    )
    assert (await ok(client, "memory_view", path="f.txt", view_range=[2, 3])).splitlines()[1:] == [
        "     2\ttwo",
        "     3\tthree",
    ]
    assert (await ok(client, "memory_view", path="f.txt", view_range=[3, -1])).splitlines()[1:] == [
        "     3\tthree",
        "     4\tfour",
    ]
    assert (await ok(client, "memory_view", path="f.txt", view_range=[4, 99])).splitlines()[1:] == [
        "     4\tfour"
    ]
    assert "[1, 4]" in await err(client, "memory_view", path="f.txt", view_range=[5, 6])
    assert "first element" in await err(client, "memory_view", path="f.txt", view_range=[0, 2])
    assert "second element" in await err(client, "memory_view", path="f.txt", view_range=[3, 2])
    assert "two integers" in await err(client, "memory_view", path="f.txt", view_range=[1])
    await err(client, "memory_view", path="f.txt", view_range=["a", "b"])
    assert (
        await err(client, "memory_view", path="missing.txt")
        == "The path /missing.txt does not exist. Please provide a valid path."
    )
    await ok(client, "memory_create", path="empty.txt", file_text="")
    assert await ok(client, "memory_view", path="empty.txt") == (
        "Here's the content of /empty.txt with line numbers:"
    )


async def test_create(client: Client, mem: Path, files: FolderFiles):
    text = await ok(client, "memory_create", path="/x/y/z.md", file_text="hello\n")
    assert text == "File created successfully at: /x/y/z.md"
    assert files.read_text("x/y/z.md") == "hello\n"
    if files.backend == "folder":
        assert (mem / "x" / "y" / "z.md").stat().st_mode & 0o077 == 0
    assert (
        await err(client, "memory_create", path="x/y/z.md", file_text="other")
        == "File /x/y/z.md already exists"
    )
    assert files.read_text("x/y/z.md") == "hello\n"
    assert "already exists" in await err(client, "memory_create", path="x", file_text="d")
    await err(client, "memory_create", path="/", file_text="root")
    assert "parent folders is a file" in await err(
        client, "memory_create", path="x/y/z.md/w", file_text="t"
    )
    await err(client, "memory_create", path="n.txt", file_text=7)


async def test_str_replace(client: Client, files: FolderFiles):
    await ok(client, "memory_create", path="f.txt", file_text="a\nb\nc\nd\ne\nf\ng\n")
    text = await ok(client, "memory_str_replace", path="f.txt", old_str="d", new_str="D1\nD2")
    assert text == (
        "The memory file has been edited. Here is the snippet showing the change "
        "(with line numbers):\n"
        "     2\tb\n     3\tc\n     4\tD1\n     5\tD2\n     6\te\n     7\tf"
    )
    assert files.read_text("f.txt") == "a\nb\nc\nD1\nD2\ne\nf\ng\n"
    assert "did not appear verbatim in /f.txt" in await err(
        client, "memory_str_replace", path="f.txt", old_str="zzz", new_str="y"
    )
    await ok(client, "memory_str_replace", path="f.txt", old_str="g", new_str="D1")
    message = await err(client, "memory_str_replace", path="f.txt", old_str="D1", new_str="y")
    assert "Multiple occurrences of old_str `D1` in lines: 4, 8" in message
    assert files.read_text("f.txt") == "a\nb\nc\nD1\nD2\ne\nf\nD1\n"
    assert "must not be empty" in await err(
        client, "memory_str_replace", path="f.txt", old_str="", new_str="y"
    )
    await ok(client, "memory_create", path="d/x", file_text="")
    assert (
        await err(client, "memory_str_replace", path="d", old_str="a", new_str="b")
        == "The path /d is not a file."
    )
    assert "does not exist" in await err(
        client, "memory_str_replace", path="nope", old_str="a", new_str="b"
    )
    # Occurrences are counted as str.count does (Anthropic's tool): overlaps are one.
    await ok(client, "memory_create", path="o.txt", file_text="aaa")
    await ok(client, "memory_str_replace", path="o.txt", old_str="aa", new_str="b")
    assert files.read_text("o.txt") == "ba"
    await ok(client, "memory_str_replace", path="f.txt", old_str="\nb\n", new_str="\n")
    assert files.read_text("f.txt").startswith("a\nc\n")


async def test_insert(client: Client, files: FolderFiles):
    await ok(client, "memory_create", path="f.txt", file_text="one\ntwo\n")
    text = await ok(client, "memory_insert", path="f.txt", insert_line=0, insert_text="zero")
    assert text.startswith("The file /f.txt has been edited.")
    assert "     1\tzero" in text
    await ok(client, "memory_insert", path="f.txt", insert_line=3, insert_text="three\n")
    await ok(client, "memory_insert", path="f.txt", insert_line=2, insert_text="1.5a\n1.5b")
    assert files.read_text("f.txt") == "zero\none\n1.5a\n1.5b\ntwo\nthree\n"
    message = await err(client, "memory_insert", path="f.txt", insert_line=7, insert_text="x")
    assert message == "Invalid `insert_line` parameter: 7. It should be within the range [0, 6]."
    assert "[0, 6]" in await err(
        client, "memory_insert", path="f.txt", insert_line=-1, insert_text="x"
    )
    await err(client, "memory_insert", path="f.txt", insert_line="x", insert_text="x")
    assert "does not exist" in await err(
        client, "memory_insert", path="nope.txt", insert_line=0, insert_text="x"
    )
    await ok(client, "memory_create", path="d/x", file_text="")
    assert "is not a file" in await err(
        client, "memory_insert", path="d", insert_line=0, insert_text="x"
    )
    await ok(client, "memory_create", path="nonl.txt", file_text="a\nb")
    await ok(client, "memory_insert", path="nonl.txt", insert_line=2, insert_text="c")
    assert files.read_text("nonl.txt") == "a\nb\nc\n"


async def test_delete_file_and_folder(client: Client, files: FolderFiles):
    await ok(client, "memory_create", path="f.txt", file_text="x")
    await ok(client, "memory_create", path="d/e/g.txt", file_text="x")
    assert await ok(client, "memory_delete", path="/f.txt") == "Successfully deleted /f.txt"
    assert not files.exists("f.txt")
    assert await ok(client, "memory_delete", path="d") == "Successfully deleted /d"
    assert not files.exists("d")
    assert await err(client, "memory_delete", path="d") == "The path /d does not exist"
    assert files.is_dir("")


@pytest.mark.parametrize("path", ["", ".", "/", "//", "sub/..", "./sub/../.", "rootlink", "sub/up"])
async def test_root_deletion_refused(client: Client, mem: Path, files: FolderFiles, path: str):
    await ok(client, "memory_create", path="sub/keep.txt", file_text="keep")
    folder = files.backend == "folder"
    if folder:
        (mem / "rootlink").symlink_to(mem)
        (mem / "sub" / "up").symlink_to("..")
    elif path in ("rootlink", "sub/up"):
        pytest.skip("symlinks are a folder's")
    message = await err(client, "memory_delete", path=path)
    assert "Cannot delete the memory directory itself" in message
    assert files.read_text("sub/keep.txt") == "keep"
    assert not folder or (mem / "rootlink").is_symlink()
    assert "itself" in await err(client, "memory_rename", old_path=path, new_path="moved")


async def test_rename(client: Client, files: FolderFiles):
    await ok(client, "memory_create", path="a.txt", file_text="A")
    await ok(client, "memory_create", path="b.txt", file_text="B")
    text = await ok(client, "memory_rename", old_path="a.txt", new_path="/new/dir/c.txt")
    assert text == "Successfully renamed /a.txt to /new/dir/c.txt"
    assert files.read_text("new/dir/c.txt") == "A" and not files.exists("a.txt")
    assert (
        await err(client, "memory_rename", old_path="new/dir/c.txt", new_path="b.txt")
        == "The destination /b.txt already exists"
    )
    assert files.read_text("b.txt") == "B"
    assert (
        await err(client, "memory_rename", old_path="ghost", new_path="g2")
        == "The path /ghost does not exist"
    )
    assert not files.exists("g2")
    await ok(client, "memory_rename", old_path="new", new_path="moved")
    assert files.exists("moved/dir/c.txt")
    assert "into itself" in await err(client, "memory_rename", old_path="moved", new_path="moved/x")
    assert "already exists" in await err(client, "memory_rename", old_path="b.txt", new_path="/")
    # renaming a key file renames the key
    await ok(client, "write_memory", key="k1", value="v")
    await ok(client, "memory_rename", old_path="k1.json", new_path="k2.json")
    assert json.loads(await ok(client, "list_memory_keys")) == ["k2"]
    assert await ok(client, "read_memory", key="k2") == "v"


async def test_nul_bytes_in_paths(client: Client):
    for tool, args in [
        ("memory_view", {"path": "a\x00b"}),
        ("memory_create", {"path": "a\x00b", "file_text": "x"}),
        ("memory_delete", {"path": "a\x00b"}),
        ("memory_rename", {"old_path": "a", "new_path": "b\x00"}),
        ("memory_insert", {"path": "\x00", "insert_line": 0, "insert_text": "x"}),
        ("memory_str_replace", {"path": "\x00", "old_str": "a", "new_str": "b"}),
    ]:
        assert "NUL" in await err(client, tool, **args)


# -- containment ------------------------------------------------------------------


async def test_dotdot_cannot_leave(client: Client, files: FolderFiles, outside: Path):
    before = snapshot(outside)
    escape = "../outside/secret.txt"
    assert "would escape the memory directory" in await err(client, "memory_view", path=escape)
    await err(client, "memory_create", path="../outside/new.txt", file_text="x")
    await err(client, "memory_create", path="a/../../outside/new2.txt", file_text="x")
    await err(client, "memory_str_replace", path=escape, old_str="top", new_str="no")
    await err(client, "memory_insert", path=escape, insert_line=0, insert_text="x")
    await err(client, "memory_delete", path=escape)
    await err(client, "memory_delete", path="../outside")
    await err(client, "memory_rename", old_path=escape, new_path="stolen.txt")
    await ok(client, "memory_create", path="mine.txt", file_text="mine")
    await err(client, "memory_rename", old_path="mine.txt", new_path="../outside/mine.txt")
    await err(client, "memory_view", path="..")
    assert snapshot(outside) == before
    assert files.read_text("mine.txt") == "mine"


async def test_absolute_paths_stay_inside(client: Client, files: FolderFiles, outside: Path):
    before = snapshot(outside)
    secret = str(outside / "secret.txt")
    # A leading "/" means the memory directory, so absolute host paths land inside it.
    assert "does not exist" in await err(client, "memory_view", path=secret)
    await err(client, "memory_str_replace", path=secret, old_str="top", new_str="no")
    await err(client, "memory_delete", path=str(outside))
    await ok(client, "memory_create", path=str(outside / "new.txt"), file_text="inside")
    assert files.read_text(f"{outside.relative_to('/')}/new.txt") == "inside"
    await err(client, "memory_view", path="/etc/passwd")
    await err(client, "memory_view", path="~/x")
    assert snapshot(outside) == before


@pytest.mark.folder_only("symlinks")
async def test_symlinks_pointing_outside(client: Client, mem: Path, outside: Path):
    mem.mkdir()
    (mem / "filelink.txt").symlink_to(outside / "secret.txt")
    (mem / "dirlink").symlink_to(outside / "dir")
    (mem / "keylink.json").symlink_to(outside / "data.json")
    (mem / "sub" / "deeper").mkdir(parents=True)
    (mem / "sub" / "deeper" / "rel").symlink_to("../../../outside")
    before = snapshot(outside)

    via = "would escape the memory directory via symlink"
    assert via in await err(client, "memory_view", path="filelink.txt")
    assert via in await err(client, "memory_view", path="dirlink")
    assert via in await err(client, "memory_view", path="dirlink/inner.txt")
    assert via in await err(client, "memory_view", path="sub/deeper/rel/secret.txt")
    assert via in await err(client, "memory_create", path="dirlink/new.txt", file_text="x")
    assert via in await err(client, "memory_create", path="sub/deeper/rel/new.txt", file_text="x")
    await err(client, "memory_str_replace", path="filelink.txt", old_str="top", new_str="no")
    await err(client, "memory_insert", path="filelink.txt", insert_line=0, insert_text="x")
    await err(
        client, "memory_insert", path="sub/deeper/rel/secret.txt", insert_line=0, insert_text="x"
    )
    await err(client, "memory_delete", path="dirlink/inner.txt")
    await err(client, "memory_delete", path="sub/deeper/rel/dir")
    await err(client, "memory_rename", old_path="dirlink/inner.txt", new_path="got.txt")
    await err(client, "memory_rename", old_path="sub/deeper/rel/secret.txt", new_path="got.txt")
    await ok(client, "memory_create", path="mine.txt", file_text="m")
    await err(client, "memory_rename", old_path="mine.txt", new_path="dirlink/mine.txt")
    await err(client, "memory_rename", old_path="mine.txt", new_path="sub/deeper/rel/mine.txt")

    # key-value tools: the escaping key file is neither listed, read, nor written through
    assert json.loads(await ok(client, "list_memory_keys")) == []
    assert json.loads(await ok(client, "search_memory", query="outside")) == []
    assert via in await err(client, "read_memory", key="keylink")
    assert via in await err(client, "write_memory", key="keylink", value="overwrite")

    listing = await ok(client, "memory_view", path="/")
    assert "filelink" not in listing and "dirlink" not in listing and "inner" not in listing
    assert "/sub/deeper/" in listing
    assert snapshot(outside) == before
    assert sorted(p.name for p in outside.parent.iterdir()) == ["mem", "outside"]


@pytest.mark.folder_only("symlinks")
async def test_symlinks_inside_are_followed(client: Client, mem: Path, files: FolderFiles):
    await ok(client, "memory_create", path="real/file.txt", file_text="real\n")
    (mem / "alias").symlink_to("real")
    assert "real" in await ok(client, "memory_view", path="alias/file.txt")
    assert "/alias/" in await ok(client, "memory_view", path="/")
    # deleting a symlink removes the link, never its target
    await ok(client, "memory_delete", path="alias")
    assert files.read_text("real/file.txt") == "real\n"


# -- two servers, atomicity, concurrency ------------------------------------------


async def test_two_servers_in_one_process(tmp_path: Path):
    one = create_server(Settings(memory_dir=tmp_path / "one"))
    two = create_server(Settings(memory_dir=tmp_path / "two"))
    async with Client(one) as c1, Client(two) as c2:
        await ok(c1, "write_memory", key="k", value="from one")
        await ok(c2, "write_memory", key="k", value="from two")
        await ok(c1, "memory_create", path="only-one.txt", file_text="1")
        assert await ok(c1, "read_memory", key="k") == "from one"
        assert await ok(c2, "read_memory", key="k") == "from two"
        assert "only-one" not in await ok(c2, "memory_view", path="/")
        await err(c2, "memory_view", path="only-one.txt")
    assert (tmp_path / "one" / "only-one.txt").exists()
    assert not (tmp_path / "two" / "only-one.txt").exists()


@pytest.mark.parametrize("fail_in", ["replace", "write"])
def test_failed_write_keeps_old_content(monkeypatch, mem: Path, fail_in: str):
    store = MemoryStore(mem)
    store.write("k", "old value")
    store.create("f.txt", "old text\n")
    real_write = os.write

    def broken_replace(*args, **kwargs):
        raise OSError(28, "No space left on device")

    def broken_write(fd, data):
        real_write(fd, bytes(data[:10]))  # a partial write, then the disk fills up
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, fail_in, broken_replace if fail_in == "replace" else broken_write)
    with pytest.raises(MemoryStoreError, match="No space left"):
        store.write("k", "new value " * 100)
    with pytest.raises(MemoryStoreError, match="No space left"):
        store.str_replace("f.txt", "old", "new")
    with pytest.raises(MemoryStoreError, match="No space left"):
        store.insert("f.txt", 0, "first")
    monkeypatch.undo()
    assert store.read("k") == "old value"
    assert (mem / "f.txt").read_text() == "old text\n"
    assert [p.name for p in mem.iterdir() if p.name.startswith(".dpt-tmp-")] == []


def test_concurrent_mutations_lose_nothing(store, files: FolderFiles):
    store.create("log.txt", "")
    store.write("counter", "")
    errors: list[BaseException] = []
    barrier = threading.Barrier(50)

    def worker(n: int) -> None:
        try:
            barrier.wait()
            store.insert("log.txt", 0, f"line {n}")
            store.write(f"key{n}", f"value {n}")
            # read-modify-write of a shared file through str_replace: retry on a stale read
            while True:
                current = files.read_text("counter.json")
                data = json.loads(current)
                try:
                    store.str_replace(
                        "counter.json",
                        current,
                        current.replace(json.dumps(data["value"]), json.dumps(data["value"] + "x")),
                    )
                    break
                except MemoryStoreError:
                    continue
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not errors, errors
    lines = files.read_text("log.txt").splitlines()
    assert sorted(lines) == sorted(f"line {n}" for n in range(50))
    keys = json.loads(store.list_keys())
    assert sorted(keys) == sorted(["counter", *(f"key{n}" for n in range(50))])
    assert store.read("counter") == "x" * 50
    if files.backend == "folder":
        assert [p.name for p in files.root.iterdir() if p.name.startswith(".dpt-tmp-")] == []


def test_store_messages_directly(mem: Path):
    store = MemoryStore(mem)
    with pytest.raises(MemoryStoreError, match="does not exist"):
        store.view("nothing")
    assert "Here're the files" in store.view("/")
    assert mem.is_dir()
    (mem.parent / "plainfile").write_text("x")
    with pytest.raises(MemoryStoreError, match="not a folder"):
        MemoryStore(mem.parent / "plainfile").list_keys()


async def test_runs_over_stdio(tmp_path: Path):
    """``python -m doc_processing_std_tools.memory`` serves on stdio (stdout stays protocol-only)."""
    import sys

    import anyio
    from fastmcp.client.transports import StdioTransport

    env = {**os.environ, "DPTTOOLS_MEMORY_DIR": "stdio-mem", "FASTMCP_LOG_LEVEL": "WARNING"}
    transport = StdioTransport(
        sys.executable, ["-m", "doc_processing_std_tools.memory"], env=env, cwd=str(tmp_path)
    )
    with anyio.fail_after(30):
        async with Client(transport) as c:
            assert {tool.name for tool in await c.list_tools()} == ALL_TOOLS
            await ok(c, "write_memory", key="k", value="over stdio")
            assert await ok(c, "read_memory", key="k") == "over stdio"
            assert "escape" in await err(c, "memory_view", path="../x")
    assert json.loads((tmp_path / "stdio-mem" / "k.json").read_text())["value"] == "over stdio"


# -- lock hold time (issue 12): slow work before the locks, bounded refusals -------------


def test_many_occurrences_are_refused_with_a_bounded_message(store, files: FolderFiles):
    store.create("big.txt", "a\n" * 200_000)
    with pytest.raises(MemoryStoreError) as caught:
        store.str_replace("big.txt", "a", "b")
    message = str(caught.value)
    assert "occurs 200,000 times; the first 20 are in lines: 1, 2, 3," in message
    assert message.endswith(", 19, 20. Please ensure it is unique")
    assert len(message) < 300
    assert files.read_text("big.txt") == "a\n" * 200_000


def test_a_refused_edit_takes_no_lock(mem: Path):
    """The search runs before the locks: with another process's flock held on the
    memory folder, a refused edit still answers (it would wait forever otherwise)."""
    import fcntl

    store = MemoryStore(mem)
    store.create("big.txt", "a\n" * 1000)
    fd = os.open(mem, os.O_RDONLY | os.O_DIRECTORY)
    outcome: list[str] = []

    def refused() -> None:
        for call in (
            lambda: store.str_replace("big.txt", "a", "b"),
            lambda: store.str_replace("big.txt", "zzz", "b"),
            lambda: store.insert("big.txt", 5000, "x"),
        ):
            try:
                call()
            except MemoryStoreError as exc:
                outcome.append(str(exc))

    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # as a second launcher in the middle of a write
        thread = threading.Thread(target=refused)
        thread.start()
        thread.join(timeout=30)
        assert not thread.is_alive(), "a refused edit waited for the folder lock"
    finally:
        os.close(fd)
    assert len(outcome) == 3, outcome


class _Interleaved(MemoryStore):
    """A store whose next lock is preceded by another writer's change (as a second
    launcher would make between this call's read and its lock)."""

    def __init__(self, memory_dir: Path) -> None:
        super().__init__(memory_dir)
        self.before_lock: list = []

    def _locked(self):  # type: ignore[override]
        if self.before_lock:
            self.before_lock.pop(0)()
        return super()._locked()


@pytest.mark.parametrize("how", ["replace", "in place, same size"])
def test_an_edit_redoes_its_work_when_the_file_changed_before_the_lock(mem: Path, how: str):
    store = _Interleaved(mem)
    store.create("f.txt", "one\ntwo\nthree\n")
    path = mem / "f.txt"

    def other_writer() -> None:
        if how == "replace":
            MemoryStore(mem).create("other.txt", "one\nTWO\nthree\n")
            os.replace(mem / "other.txt", path)
        else:
            info = path.stat()
            with open(path, "r+b") as handle:
                handle.write(b"ONE")
            os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))

    store.before_lock = [other_writer]
    store.str_replace("f.txt", "three", "3")
    assert path.read_text() == ("one\nTWO\n3\n" if how == "replace" else "ONE\ntwo\n3\n")
    store.before_lock = [lambda: path.write_text("two only\n")]
    with pytest.raises(MemoryStoreError, match="did not appear verbatim"):
        store.str_replace("f.txt", "3", "three")  # gone by the time the lock was held
    assert path.read_text() == "two only\n"
    store.before_lock = [lambda: path.write_text("x\ny\n")]
    assert "     2\tnew" in store.insert("f.txt", 1, "new")
    assert path.read_text() == "x\nnew\ny\n"


@pytest.mark.parametrize("cost", ["cheap", "costly"])
def test_an_edit_raced_every_time_finishes_under_the_lock(mem: Path, monkeypatch, cost: str):
    """A cheap edit whose file changed before its lock is redone under that lock; a costly
    one computes again outside the locks, and only its last attempt computes under them."""
    from doc_processing_std_tools import locking
    from doc_processing_std_tools.memory import folder

    if cost == "costly":
        monkeypatch.setattr(folder, "CHEAP_EDIT_SECONDS", 0.0)  # every edit counts as costly
    decode = folder._decode_text
    computed_locked: list[bool] = []

    def spy(data: bytes, display: str) -> str:
        computed_locked.append(locking.PROCESS_LOCK.locked())
        return decode(data, display)

    monkeypatch.setattr(folder, "_decode_text", spy)
    store = _Interleaved(mem)
    store.create("f.txt", "n0\n")
    path = mem / "f.txt"
    writes = iter(range(1, 100))
    store.before_lock = [lambda: path.write_text(f"n{next(writes)}\n")] * memory.EDIT_ATTEMPTS
    store.insert("f.txt", 0, "top")
    if cost == "cheap":
        assert path.read_text() == "top\nn1\n"
        assert computed_locked == [False, True]
    else:
        assert path.read_text() == f"top\nn{memory.EDIT_ATTEMPTS}\n"
        assert computed_locked == [False] * (memory.EDIT_ATTEMPTS - 1) + [True]


class _Counted(MemoryStore):
    """Counts each thread's lock entries; once ``start`` is set, every thread's first entry
    waits until ``start.parties`` threads have read and computed, so all of them edit the same content (the worst case)."""

    def __init__(self, memory_dir: Path) -> None:
        super().__init__(memory_dir)
        self.start: threading.Barrier | None = None
        self.entries: dict[int, int] = {}
        self.count = threading.Lock()

    def _locked(self):  # type: ignore[override]
        me = threading.get_ident()
        with self.count:
            self.entries[me] = self.entries.get(me, 0) + 1
            first = self.entries[me] == 1
        if first and self.start is not None:
            self.start.wait(30)
        return super()._locked()


def test_concurrent_inserts_into_one_file_take_the_locks_once_each(mem: Path):
    """8 inserts that all computed on the same content: the first writes, each other one
    redoes its cheap edit under the locks it already holds instead of starting over (before,
    losers read and computed again outside the locks and came back, up to 3 times each)."""
    store = _Counted(mem)
    store.create("f.txt", "")
    store.entries.clear()
    store.start = threading.Barrier(8)
    errors: list[BaseException] = []

    def insert(i: int) -> None:
        try:
            store.insert("f.txt", 0, f"line {i}")
        except BaseException as exc:  # reported below, with the thread's own error
            errors.append(exc)

    threads = [threading.Thread(target=insert, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    assert sorted((mem / "f.txt").read_text().splitlines()) == [f"line {i}" for i in range(8)]
    assert sorted(store.entries.values()) == [1] * 8, store.entries


def test_write_memory_names_the_previous_key_of_a_large_value(store):
    store.write("a/b", "x" * 3_000_000)
    assert store.write("a_b", "small") == (
        "Memory 'a_b' saved, replacing the value of 'a/b' (same file a_b.json)."
    )


# -- helpers that replaced slower equivalents ------------------------------------------

TEXT = st.text(
    alphabet=st.sampled_from(list('a"\\\n\t\x00\x1fé☃\ud800\udcff😀\u2028')), max_size=12
)


@given(key=TEXT, value=TEXT)
def test_encode_entry_is_json_dumps_byte_for_byte(key: str, value: str):
    assert formats._encode_entry(key, value) == formats._encode_json({"key": key, "value": value})


@given(content=st.text(alphabet="ab\n\r", max_size=30), data=st.data())
def test_snippet_at_matches_the_split_lines_snippet(content: str, data):
    lines = formats._split_lines(content)
    if not lines:
        return
    first = data.draw(st.integers(0, len(lines) - 1))
    last = data.draw(st.integers(first, len(lines) - 1))
    assert formats._snippet_at(content, first, last) == formats._snippet(lines, first, last)


@pytest.mark.slow
def test_building_the_server_does_not_import_griffe(tmp_path: Path) -> None:
    """fastmcp parses a tool's docstring with griffe (~40 ms to import, on every start-up);
    memory-tools hands its descriptions over ready-made, so nothing imports it."""
    import subprocess
    import sys

    code = (
        "import sys; from doc_processing_std_tools.memory import Settings, create_server; "
        f"create_server(Settings(memory_dir={str(tmp_path / 'mem')!r})); "
        "print('griffe' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


async def test_tool_descriptions_are_the_docstrings(tmp_path: Path) -> None:
    server = create_server(Settings(memory_dir=tmp_path / "mem"))
    async with Client(server) as client:
        tools = {tool.name: tool for tool in await client.list_tools()}
    assert tools["write_memory"].description.startswith("Store a text value under a key")
    assert all(tool.description for tool in tools.values())


# -- the saved index is read when the server is served, not when it is built --------


@pytest.fixture
def saved_index(mem: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A saved index of two keys for *mem*, as a launcher that exited leaves it (the files
    count as changed long ago, so it keeps them: see test_memory_scale's ``settled``)."""
    from doc_processing_std_tools.memory import index

    real = index.time.time_ns
    monkeypatch.setattr(index.time, "time_ns", lambda: real() + 10 * index.RACY_NS)
    store = MemoryStore(mem)
    store.write("alpha", "one")
    store.write("beta", "two")
    store.search("")
    store.index.save()


def preloader(server):
    """The provider of a memory-tools server that reads its saved index when served."""
    (found,) = [p for p in server.providers if hasattr(p, "store") and hasattr(p, "thread")]
    return found


def assert_preloaded(server) -> None:
    provider = preloader(server)
    assert provider.thread is not None, "serving started no preload"
    provider.thread.join()
    assert set(provider.store.index._by_name or {}) == {"alpha.json", "beta.json"}


@pytest.mark.usefixtures("saved_index")
def test_building_the_server_starts_no_preload(mem: Path, monkeypatch: pytest.MonkeyPatch):
    """dpt-launch tools, --check and client-config build servers they never serve."""
    started = []
    monkeypatch.setattr(memory.EntryIndex, "preload", lambda self: started.append(self))
    before = {t for t in threading.enumerate() if t.name == "dpt-memory-index"}
    server = create_server(Settings(memory_dir=mem))
    assert started == []
    assert {t for t in threading.enumerate() if t.name == "dpt-memory-index"} <= before
    assert preloader(server).thread is None
    assert preloader(server).store.index._by_name is None


async def test_with_no_saved_index_serving_scans_the_folder_before_any_search(
    mem: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    """Issue 25: a launcher's first search_memory read every entry when no index was saved
    (2.75x grep at 10k keys); the scan now runs in the background as soon as it is served."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty-cache"))
    store = MemoryStore(mem)
    store.write("alpha", "one")
    store.write("beta", "two")
    server = create_server(Settings(memory_dir=mem))
    assert preloader(server).store.index._by_name is None
    async with Client(server):
        assert_preloaded(server)


async def test_serving_makes_no_memory_folder(tmp_path: Path):
    missing = tmp_path / "not-yet"
    server = create_server(Settings(memory_dir=missing))
    async with Client(server):
        preloader(server).thread.join()
    assert not missing.exists()


@pytest.mark.usefixtures("saved_index")
async def test_a_served_server_has_preloaded_its_saved_index(mem: Path):
    server = create_server(Settings(memory_dir=mem))
    async with Client(server):
        assert_preloaded(server)  # before any search


@pytest.mark.usefixtures("saved_index")
async def test_a_server_mounted_by_the_launcher_has_preloaded_its_saved_index(
    mem: Path, write_config
):
    from doc_processing_std_tools.launcher.compose import compose
    from doc_processing_std_tools.launcher.config import load_config

    config = write_config(f"servers:\n  memory-tools:\n    settings: {{memory_dir: {mem}}}\n")
    composition = await compose(load_config(config))
    (mount,) = composition.mounts
    assert preloader(mount.server).thread is None  # composed, not yet served
    try:
        async with Client(composition.root) as client:
            assert_preloaded(mount.server)
            assert "alpha" in await ok(client, "list_memory_keys")
    finally:
        await composition.aclose()


PATH_TOOLS = {
    "memory_view",
    "memory_create",
    "memory_str_replace",
    "memory_insert",
    "memory_delete",
    "memory_rename",
}


async def test_anthropic_style_memories_paths_name_the_memory_directory(client, files) -> None:
    """Anthropic's memory tool sends ``/memories/...``: it is the memory directory, and every
    path tool's description says how paths are rooted."""
    await ok(client, "memory_create", path="/memories/notes/todo.md", file_text="one\n")
    assert "one" in await ok(client, "memory_view", path="notes/todo.md")
    assert "notes" in await ok(client, "memory_view", path="/memories")
    await ok(
        client, "memory_str_replace", path="/memories/notes/todo.md", old_str="one", new_str="two"
    )
    await ok(
        client, "memory_insert", path="/memories/notes/todo.md", insert_line=0, insert_text="zero"
    )
    await ok(
        client, "memory_rename", old_path="/memories/notes/todo.md", new_path="/memories/done.md"
    )
    shown = await ok(client, "memory_view", path="/done.md")
    assert "1\tzero" in shown and "2\ttwo" in shown
    # without the leading "/", memories is an ordinary folder name
    await ok(client, "memory_create", path="memories/kept.md", file_text="x\n")
    assert "x" in await ok(client, "memory_view", path="/memories/memories/kept.md")
    await ok(client, "memory_delete", path="/memories/done.md")
    await err(client, "memory_view", path="/memories/done.md")
    for tool in await client.list_tools():
        if tool.name in PATH_TOOLS:
            assert '"/memories" are the directory itself' in (tool.description or ""), tool.name
