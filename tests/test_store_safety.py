"""Store safety (issue 12): refused calls change nothing, bounded error texts, no crash
litter, reserved names, and depth, for the memory-tools and filesystem servers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from conftest import snapshot
from fastmcp import Client

from doc_processing_std_tools import filesystem, memory
from doc_processing_std_tools.locking import LOCK_FILE_NAME

LONG_NAME = "n" * 300  # over NAME_MAX (255 bytes)


def state(base: Path) -> dict[str, tuple]:
    """Everything under *base*, without the lock files (created on first use, kept)."""
    return {k: v for k, v in snapshot(base).items() if not k.endswith("/" + LOCK_FILE_NAME)}


async def call(client: Client, tool: str, args: dict[str, Any]) -> tuple[bool, str]:
    result = await client.call_tool(tool, args, raise_on_error=False)
    text = "\n".join(getattr(block, "text", "") for block in result.content)
    return result.is_error, text


# -- worlds ---------------------------------------------------------------------


@pytest.fixture
def mem_world(tmp_path: Path) -> Path:
    """tmp/mem (the memory directory) with a few entries, and tmp/outside beside it."""
    mem = tmp_path / "mem"
    (mem / "d" / "inner").mkdir(parents=True)
    (mem / "d" / "f.md").write_text("in d\n")
    (mem / "exists.md").write_text("one\ntwo\ntwo\n")
    (mem / "folder.json").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("secret\n")
    return mem


@pytest.fixture
async def mem_client(mem_world: Path) -> AsyncIterator[Client]:
    async with Client(memory.create_server(memory.Settings(memory_dir=mem_world))) as c:
        await call(c, "write_memory", {"key": "warm", "value": "creates the lock file"})
        yield c


@pytest.fixture
def fs_world(tmp_path: Path) -> Path:
    """tmp/root (the first root), tmp/root2, and tmp/outside."""
    root = tmp_path / "root"
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "a.txt").write_text("alpha\nbeta\nbeta\n")
    (tmp_path / "root2").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("secret\n")
    return root


@pytest.fixture
async def fs_client(fs_world: Path) -> AsyncIterator[Client]:
    settings = filesystem.Settings(roots=[fs_world, fs_world.parent / "root2"])
    async with Client(filesystem.create_server(settings)) as c:
        yield c


# -- 1. a refused call changes nothing ------------------------------------------------

MEMORY_REFUSALS: list[tuple[str, dict[str, Any]]] = [
    # memory_rename
    ("memory_rename", {"old_path": "/d", "new_path": "/d/x/y/z"}),
    ("memory_rename", {"old_path": "/d", "new_path": "/d/x"}),
    ("memory_rename", {"old_path": "/d", "new_path": "/exists.md"}),
    ("memory_rename", {"old_path": "/missing", "new_path": "/new1/new2/x"}),
    ("memory_rename", {"old_path": "/", "new_path": "/new1/x"}),
    ("memory_rename", {"old_path": "/d", "new_path": "/new1/../../outside/x"}),
    ("memory_rename", {"old_path": "/d", "new_path": "/new1/.dpt-x"}),
    ("memory_rename", {"old_path": "/d", "new_path": f"/new1/new2/{LONG_NAME}"}),
    ("memory_rename", {"old_path": "/d", "new_path": "/exists.md/new1/x"}),
    # memory_create
    ("memory_create", {"path": "/new1/new2/../../exists.md", "file_text": "x"}),
    ("memory_create", {"path": "/new1/../../outside/x", "file_text": "x"}),
    ("memory_create", {"path": "/exists.md/new1/x", "file_text": "x"}),
    ("memory_create", {"path": f"/new1/new2/{LONG_NAME}", "file_text": "x"}),
    ("memory_create", {"path": f"/new1/{LONG_NAME}/x", "file_text": "x"}),
    ("memory_create", {"path": "/new1/.dpt.lock", "file_text": "x"}),
    ("memory_create", {"path": "/", "file_text": "x"}),
    ("memory_create", {"path": "/d", "file_text": "x"}),
    ("memory_create", {"path": "/new1/x", "file_text": "bad \ud800 text"}),
    ("memory_create", {"path": "/new1/x"}),
    # memory_str_replace / memory_insert
    ("memory_str_replace", {"path": "/exists.md", "old_str": "nope", "new_str": "x"}),
    ("memory_str_replace", {"path": "/exists.md", "old_str": "two", "new_str": "x"}),
    ("memory_str_replace", {"path": "/exists.md", "old_str": "", "new_str": "x"}),
    ("memory_str_replace", {"path": "/d", "old_str": "a", "new_str": "x"}),
    ("memory_str_replace", {"path": "/new1/x", "old_str": "a", "new_str": "x"}),
    ("memory_insert", {"path": "/exists.md", "insert_line": 99, "insert_text": "x"}),
    ("memory_insert", {"path": "/exists.md", "insert_line": -1, "insert_text": "x"}),
    ("memory_insert", {"path": "/exists.md", "insert_line": "x", "insert_text": "x"}),
    ("memory_insert", {"path": "/new1/x", "insert_line": 0, "insert_text": "x"}),
    # memory_delete
    ("memory_delete", {"path": "/"}),
    ("memory_delete", {"path": "/d/.."}),
    ("memory_delete", {"path": "/missing"}),
    ("memory_delete", {"path": "/../outside/secret.txt"}),
    ("memory_delete", {"path": "/.dpt.lock"}),
    # key-value tools
    ("write_memory", {"key": "", "value": "x"}),
    ("write_memory", {"key": ".hidden", "value": "x"}),
    ("write_memory", {"key": LONG_NAME, "value": "x"}),
    ("write_memory", {"key": "folder", "value": "x"}),
    ("write_memory", {"key": "k", "value": 12}),
    ("delete_memory", {"key": "missing"}),
    ("delete_memory", {"key": "../exists"}),
]


@pytest.mark.parametrize(("tool", "args"), MEMORY_REFUSALS)
async def test_a_refused_memory_call_changes_nothing(
    mem_client: Client, mem_world: Path, tool: str, args: dict[str, Any]
) -> None:
    before = state(mem_world.parent)
    is_error, text = await call(mem_client, tool, args)
    assert is_error, text
    assert state(mem_world.parent) == before, text


async def test_memory_create_with_the_memory_dirs_own_absolute_path(
    mem_client: Client, mem_world: Path
) -> None:
    before = state(mem_world.parent)
    escape = f"{mem_world}/../outside/secret.txt"
    is_error, text = await call(mem_client, "memory_create", {"path": escape, "file_text": "x"})
    assert is_error and "escape" in text, text
    assert state(mem_world.parent) == before
    # The directory's own absolute path names the directory itself.
    inside = f"{mem_world}/notes/new.md"
    is_error, text = await call(mem_client, "memory_create", {"path": inside, "file_text": "x"})
    assert not is_error, text
    assert (mem_world / "notes" / "new.md").read_text() == "x"
    assert not (mem_world / mem_world.relative_to("/")).exists()


FS_REFUSALS: list[tuple[str, dict[str, Any]]] = [
    ("write_file", {"path": "../outside/new.txt", "content": "x"}),
    ("write_file", {"path": "new1/x.txt", "content": "x"}),
    ("write_file", {"path": "sub", "content": "x"}),
    ("write_file", {"path": f"sub/{LONG_NAME}", "content": "x"}),
    ("write_file", {"path": "a.txt/x", "content": "x"}),
    ("edit_file", {"path": "a.txt", "edits": [{"oldText": "nope", "newText": "x"}]}),
    (
        "edit_file",
        {
            "path": "a.txt",
            "edits": [{"oldText": "alpha", "newText": "x"}, {"oldText": "nope", "newText": "y"}],
        },
    ),
    ("edit_file", {"path": "a.txt", "edits": []}),
    ("edit_file", {"path": "a.txt", "edits": [{"oldText": "", "newText": "x"}]}),
    ("edit_file", {"path": "missing.txt", "edits": [{"oldText": "a", "newText": "x"}]}),
    ("edit_file", {"path": "sub", "edits": [{"oldText": "a", "newText": "x"}]}),
    ("edit_file", {"path": "a.txt", "edits": "not a list"}),
    ("create_directory", {"path": "a.txt"}),
    ("create_directory", {"path": "a.txt/new1"}),
    ("create_directory", {"path": f"new1/new2/{LONG_NAME}"}),
    ("create_directory", {"path": f"new1/{LONG_NAME}/x"}),
    ("create_directory", {"path": "new1/../../outside/new"}),
    ("create_directory", {"path": "../outside/new"}),
    ("move_file", {"source": "missing", "destination": "new"}),
    ("move_file", {"source": "sub", "destination": "a.txt"}),
    ("move_file", {"source": "sub", "destination": "sub/x"}),
    ("move_file", {"source": "sub", "destination": "sub/deeper/x"}),
    ("move_file", {"source": "sub", "destination": "new1/x"}),
    ("move_file", {"source": "sub", "destination": "../outside/sub"}),
    ("move_file", {"source": ".", "destination": "sub/x"}),
    ("move_file", {"source": "a.txt", "destination": f"sub/{LONG_NAME}"}),
]


@pytest.mark.parametrize(("tool", "args"), FS_REFUSALS)
async def test_a_refused_filesystem_call_changes_nothing(
    fs_client: Client, fs_world: Path, tool: str, args: dict[str, Any]
) -> None:
    before = state(fs_world.parent)
    is_error, text = await call(fs_client, tool, args)
    assert is_error, text
    assert state(fs_world.parent) == before, text


async def test_dotdot_out_of_a_missing_folder_creates_nothing(fs_client: Client, fs_world: Path):
    """``new1/new2/../../x`` needs no ``new1``: only ``x`` is made (as the reference server does)."""
    is_error, text = await call(fs_client, "create_directory", {"path": "new1/new2/../../made"})
    assert not is_error, text
    assert (fs_world / "made").is_dir()
    assert not (fs_world / "new1").exists()
