"""Store safety (issue 12): refused calls change nothing, bounded error texts, no crash
litter, reserved names, and depth, for the memory-tools and filesystem servers."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastmcp import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from doc_processing_std_tools import filesystem, memory
from doc_processing_std_tools.containment import TEMP_PREFIX, Jail
from doc_processing_std_tools.locking import LOCK_FILE_NAME
from helpers.launch import launched, text_of
from helpers.memory_files import FolderFiles, RedisFiles
from helpers.trees import snapshot

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
    return make_mem_world(tmp_path)


def make_mem_world(tmp_path: Path) -> Path:
    mem = tmp_path / "mem"
    (mem / "d" / "inner").mkdir(parents=True)
    (mem / "d" / "f.md").write_text("in d\n")
    (mem / "exists.md").write_text("one\ntwo\ntwo\n")
    (mem / "folder.json").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("secret\n")
    return mem


@pytest.fixture
def mem_files(memory_backend: dict[str, Any], tmp_path: Path) -> FolderFiles:
    """mem_world's entries on each backend (see conftest's ``memory_backend``)."""
    if memory_backend.get("backend") != "redis":
        return FolderFiles(make_mem_world(tmp_path))
    files = RedisFiles(str(memory_backend["url"]), str(memory_backend["namespace"]))
    files.mkdir("d/inner")
    files.write_text("d/f.md", "in d\n")
    files.write_text("exists.md", "one\ntwo\ntwo\n")
    files.mkdir("folder.json")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("secret\n")
    return files


def mem_state(files: FolderFiles, base: Path) -> tuple[Any, ...]:
    """Everything a memory call could change: the folders under *base*, and on Redis the
    namespace's four hashes (its change counter included: a refusal must not move it)."""
    if not isinstance(files, RedisFiles):
        return (state(base),)
    return (state(base), *(files.redis.hgetall(key) for key in files.memory.keys))


async def _client(settings: memory.Settings) -> AsyncIterator[Client]:
    async with Client(memory.create_server(settings)) as c:
        await call(c, "write_memory", {"key": "warm", "value": "creates the lock file"})
        yield c


@pytest.fixture
async def mem_client(
    memory_backend: dict[str, Any], mem_files: FolderFiles
) -> AsyncIterator[Client]:
    async for c in _client(memory.Settings(**memory_backend)):
        yield c


@pytest.fixture
async def folder_mem_client(mem_world: Path) -> AsyncIterator[Client]:
    async for c in _client(memory.Settings(memory_dir=mem_world)):
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
    mem_client: Client, mem_files: FolderFiles, tmp_path: Path, tool: str, args: dict[str, Any]
) -> None:
    before = mem_state(mem_files, tmp_path)
    is_error, text = await call(mem_client, tool, args)
    assert is_error, text
    assert mem_state(mem_files, tmp_path) == before, text


async def test_memory_create_with_the_memory_dirs_own_absolute_path(
    folder_mem_client: Client, mem_world: Path
) -> None:
    mem_client = folder_mem_client
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


# -- 2. error texts: bounded, no library URLs, never a traceback -------------------------

HUGE = "x" * (2 * 1024 * 1024)
HUGE_PATH = "a/" * (1024 * 1024)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=8,
)
ARG_VALUES = JSON_VALUES | st.sampled_from([HUGE, HUGE_PATH, "\x00", "../" * 50, ".dpt.lock", "/"])
WRITE_RESULTS_BOUNDED = {
    "write_memory",
    "delete_memory",
    "memory_create",
    "memory_delete",
    "memory_rename",
    "write_file",
    "create_directory",
    "move_file",
}
REPLY_LIMIT = 8 * 1024


def servers_to_fuzz(base: Path, redis_url: str | None = None) -> dict[str, Any]:
    (base / "mem").mkdir(parents=True, exist_ok=True)
    (base / "root").mkdir(exist_ok=True)
    (base / "root" / "a.txt").write_text("alpha\n")
    servers = {
        "memory": memory.create_server(memory.Settings(memory_dir=base / "mem")),
        "filesystem": filesystem.create_server(filesystem.Settings(roots=[base / "root"])),
    }
    if redis_url is not None:
        settings = memory.Settings(url=redis_url, namespace=f"fuzz-{os.getpid()}-{base.name}")
        servers["memory on redis"] = memory.create_server(settings)
    return servers


def fuzz_calls(tools: dict[str, dict[str, Any]]) -> st.SearchStrategy:
    """(tool, arguments): some parameters left out, others of any JSON type, extra names."""

    @st.composite
    def one(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
        name = draw(st.sampled_from(sorted(tools)))
        params = sorted(tools[name].get("properties", {}))
        chosen = draw(st.lists(st.sampled_from(params), unique=True)) if params else []
        args = {param: draw(ARG_VALUES) for param in chosen}
        if draw(st.booleans()) and draw(st.booleans()):
            args[draw(st.sampled_from(["extra", "path2", ""]))] = draw(JSON_VALUES)
        return name, args

    return st.lists(one(), min_size=1, max_size=8)


@pytest.mark.parametrize("server_name", ["memory", "filesystem", "memory on redis"])
def test_bad_arguments_fuzz_gets_short_readable_errors(
    tmp_path: Path, server_name: str, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue("redis_url") if server_name == "memory on redis" else None
    server = servers_to_fuzz(tmp_path, url)[server_name]

    async def schemas() -> dict[str, dict[str, Any]]:
        async with Client(server) as c:
            return {tool.name: tool.input_schema for tool in await c.list_tools()}

    tools = asyncio.run(schemas())
    seen_errors: list[str] = []

    @settings(
        max_examples=40,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(fuzz_calls(tools))
    def check(calls: list[tuple[str, dict[str, Any]]]) -> None:
        async def run() -> None:
            async with Client(server) as c:
                for name, args in calls:
                    result = await c.call_tool(name, args, raise_on_error=False)
                    text = "\n".join(getattr(block, "text", "") for block in result.content)
                    assert "Traceback" not in text
                    assert "errors.pydantic.dev" not in text, text
                    assert "For further information" not in text, text
                    if result.is_error:
                        seen_errors.append(text)
                        assert text.strip(), (name, args)
                    if result.is_error or name in WRITE_RESULTS_BOUNDED:
                        assert len(text) <= REPLY_LIMIT, (name, len(text), text[:300])

        asyncio.run(run())

    check()
    assert seen_errors  # the fuzz did reach the error paths


@pytest.mark.parametrize(
    ("tool", "args", "expect"),
    [
        ("memory_insert", {"path": "x", "insert_line": "x", "insert_text": "y"}, "insert_line"),
        ("memory_create", {"path": "x"}, "file_text is required (a string)"),
        ("memory_str_replace", {"path": "exists.md", "old_str": HUGE, "new_str": ""}, "2,097,152"),
        ("memory_create", {"path": HUGE_PATH, "file_text": "x"}, "limit is 4,096"),
        ("write_memory", {"key": "\x00" + HUGE, "value": "x"}, "NUL"),
        ("memory_view", {"path": "/exists.md", "view_range": list(range(10**5))}, "view_range"),
    ],
)
async def test_memory_errors_quote_at_most_a_kilobyte(
    mem_client: Client, tool: str, args: dict[str, Any], expect: str
) -> None:
    is_error, text = await call(mem_client, tool, args)
    assert is_error, text
    assert expect in text
    assert len(text) < 2048, text[:300]
    assert "pydantic" not in text


@pytest.mark.parametrize(
    ("tool", "args", "expect"),
    [
        ("edit_file", {"path": "a.txt", "edits": [{"oldText": HUGE, "newText": ""}]}, "2,097,152"),
        ("edit_file", {"path": "a.txt", "edits": "s"}, "{oldText, newText} objects"),
        ("write_file", {"path": HUGE_PATH, "content": "x"}, "limit is 4,096"),
        ("read_text_file", {"path": "/" + HUGE}, "Access denied"),
        ("read_multiple_files", {"paths": ["/" + HUGE, "a.txt"]}, "alpha"),
        ("list_directory_with_sizes", {"path": ".", "sortBy": "zz"}, "'name' or 'size'"),
        ("read_text_file", {"path": "a.txt", "head": -1}, "greater than or equal to 0"),
    ],
)
async def test_filesystem_errors_quote_at_most_a_kilobyte(
    fs_client: Client, tool: str, args: dict[str, Any], expect: str
) -> None:
    _is_error, text = await call(fs_client, tool, args)
    assert expect in text
    assert len(text) < 2048, text[:300]
    assert "pydantic" not in text


# -- 3. crash litter: dead writers' temp files are removed at start and never shown ----------

WRITER = """
import os, sys, time
from doc_processing_std_tools import containment
os.fsync = lambda fd: (print("writing", flush=True), time.sleep(600))
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
containment.atomic_write_at(fd, "target.txt", b"x" * 1000)
"""


def old(path: Path) -> None:
    """Make a file look older than STALE_TEMP_SECONDS."""
    past = path.stat().st_mtime - 3600
    os.utime(path, (past, past))


def temps(base: Path) -> list[str]:
    return sorted(str(p.relative_to(base)) for p in base.rglob(f"{TEMP_PREFIX}*"))


def start_writer(folder: Path) -> subprocess.Popen[str]:
    """A real writer, stopped inside atomic_write_at with its temp file written and locked."""
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(folder)], stdout=subprocess.PIPE, text=True
    )
    assert writer.stdout is not None and writer.stdout.readline() == "writing\n"
    return writer


def test_a_temp_file_is_removed_only_once_its_writer_is_dead(tmp_path: Path) -> None:
    jail = Jail([tmp_path])
    writer = start_writer(tmp_path)
    try:
        (live,) = temps(tmp_path)
        old(tmp_path / live)
        assert jail.sweep(str(tmp_path)) == 0  # old, but its writer holds it
        (tmp_path / f"{TEMP_PREFIX}fresh").write_text("just created, not locked yet")
        assert jail.sweep(str(tmp_path)) == 0  # too young to judge
    finally:
        writer.kill()
        writer.wait()
    assert jail.sweep(str(tmp_path)) == 1
    assert temps(tmp_path) == [f"{TEMP_PREFIX}fresh"]
    assert not (tmp_path / "target.txt").exists()


def make_litter(folder: Path) -> None:
    """Temp files of dead writers at the top and deeper down (as SIGKILL leaves them)."""
    for where in (folder, folder / "sub"):
        where.mkdir(parents=True, exist_ok=True)
        for i in range(3):
            path = where / f"{TEMP_PREFIX}{i}dead"
            path.write_text('{"key": "half", "value": "written')
            old(path)


async def test_memory_litter_is_removed_at_start_and_never_shown(tmp_path: Path) -> None:
    mem = tmp_path / "mem"
    make_litter(mem)
    (mem / "note.json").write_text('{"key": "note", "value": "kept"}')
    async with Client(memory.create_server(memory.Settings(memory_dir=mem))) as c:
        keys = await call(c, "list_memory_keys", {})
        view = await call(c, "memory_view", {"path": "/"})
        found = await call(c, "search_memory", {"query": "half"})
    assert keys == (False, '["note"]')
    assert "dpt" not in view[1] and found == (False, "[]")
    assert temps(mem) == []


async def test_filesystem_litter_is_hidden_everywhere_and_swept(tmp_path: Path) -> None:
    root = tmp_path / "root"
    make_litter(root)
    (root / "kept.txt").write_text("kept")
    async with Client(filesystem.create_server(filesystem.Settings(roots=[root]))) as c:
        assert temps(root) == [f"sub/{TEMP_PREFIX}{i}dead" for i in range(3)]  # top: at start
        (root / f"{TEMP_PREFIX}late").write_text("left by a crash after the start")
        old(root / f"{TEMP_PREFIX}late")
        replies = [
            await call(c, "list_directory", {"path": "."}),
            await call(c, "list_directory_with_sizes", {"path": "."}),
            await call(c, "directory_tree", {"path": "."}),
            await call(c, "search_files", {"path": ".", "pattern": "**"}),
            await call(c, "search_files", {"path": ".", "pattern": "**/.dpt*"}),
        ]
    for is_error, text in replies:
        assert not is_error, text
        assert "dpt" not in text, text
    assert "kept.txt" in replies[0][1]
    assert temps(root) == []  # the listings removed what they met


# -- 4. cross-server tampering: filesystem cannot touch .dpt*, memory's lock survives ----------


@pytest.fixture
async def shared(tmp_path: Path) -> AsyncIterator[tuple[Client, Client, Path]]:
    """memory-tools on root/mem and filesystem on root (the shipped layout: one folder)."""
    root = tmp_path / "root"
    mem = root / "mem"
    mem.mkdir(parents=True)
    fs_server = filesystem.create_server(filesystem.Settings(roots=[root]))
    mem_server = memory.create_server(memory.Settings(memory_dir=mem))
    async with Client(mem_server) as m, Client(fs_server) as f:
        assert not (await call(m, "write_memory", {"key": "k", "value": "v"}))[0]
        yield m, f, root


TAMPERING: list[tuple[str, dict[str, Any]]] = [
    ("move_file", {"source": "mem/.dpt.lock", "destination": "stolen"}),
    ("write_file", {"path": "mem/.dpt.lock", "content": "x"}),
    ("create_directory", {"path": "mem/.dpt.lock/x"}),
    ("edit_file", {"path": "mem/.dpt.lock", "edits": [{"oldText": "a", "newText": "b"}]}),
    ("read_text_file", {"path": "mem/.dpt.lock"}),
    ("get_file_info", {"path": ".dpt.lock"}),
    ("write_file", {"path": "mem/.dpt-tmp-1", "content": "x"}),
    ("move_file", {"source": "mem/k.json", "destination": "mem/.dpt-x"}),
    ("write_file", {"path": "alias", "content": "x"}),  # a symlink to mem/.dpt.lock
]


@pytest.mark.parametrize(("tool", "args"), TAMPERING)
async def test_filesystem_cannot_touch_reserved_names(
    shared: tuple[Client, Client, Path], tool: str, args: dict[str, Any]
) -> None:
    m, f, root = shared
    os.symlink("mem/.dpt.lock", root / "alias")
    before = snapshot(root)
    is_error, text = await call(f, tool, args)
    assert is_error and "reserved name" in text, text
    assert snapshot(root) == before
    assert not (await call(m, "write_memory", {"key": "k2", "value": "still works"}))[0]
    listing = (await call(f, "list_directory", {"path": "mem"}))[1]
    assert ".dpt" not in listing


@pytest.mark.parametrize("damage", ["moved", "folder", "symlink"])
async def test_memory_writes_survive_a_tampered_lock_marker(
    shared: tuple[Client, Client, Path], damage: str
) -> None:
    m, _f, root = shared
    marker = root / "mem" / LOCK_FILE_NAME
    marker.unlink()
    if damage == "folder":
        marker.mkdir()
    elif damage == "symlink":
        marker.symlink_to(root / "elsewhere")
    is_error, text = await call(m, "write_memory", {"key": "after", "value": damage})
    assert not is_error, text
    assert (root / "mem" / "after.json").exists()
    assert not (root / "elsewhere").exists()


HOLD_FLOCK = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
sys.stdin.readline()
"""


@contextmanager
def flock_held(folder: Path) -> Iterator[None]:
    """Another process (another launcher, say) holds *folder*'s flock until the block ends."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_FLOCK, str(folder)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        yield
    finally:
        assert holder.stdin is not None
        holder.stdin.write("\n")
        holder.stdin.flush()
        holder.wait()


def test_a_memory_file_edited_through_filesystem_takes_the_memory_flock(tmp_path: Path) -> None:
    root = tmp_path / "root"
    mem = root / "mem"
    store = memory.MemoryStore(mem)
    store.create("/notes.md", "draft\n")  # makes the folder and its lock marker
    fs = filesystem.FileSystem(Jail([root]), filesystem.Settings(roots=[root]))
    done = threading.Event()
    worker = threading.Thread(
        target=lambda: (fs.edit_file("mem/notes.md", [("draft", "final")]), done.set())
    )
    with flock_held(mem):
        worker.start()
        assert not done.wait(1.0)  # waits for memory's lock (another launcher's write)
        assert (mem / "notes.md").read_text() == "draft\n"
    worker.join(30)
    assert done.is_set()
    assert (mem / "notes.md").read_text() == "final\n"


# -- 5. filesystem across launchers: no edit lost -----------------------------------------

LAUNCHERS = 3
EDITS = 120


@pytest.mark.slow  # a storm: three launchers editing one root
async def test_three_launchers_on_one_root_lose_no_edit(write_config, tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "slots.md").write_text("".join(f"slot-{i:03d}: empty\n" for i in range(EDITS)))
    configs = [
        write_config(
            f"""\
            servers:
              files:
                server: filesystem
                settings:
                  roots: [{root}]
            """,
            name=f"l{n}.yaml",
        )
        for n in range(LAUNCHERS)
    ]
    errors: list[str] = []

    async def launcher(config: Path, slots: range) -> None:
        async with launched(config) as session:

            async def edit(i: int) -> None:
                edit = {"oldText": f"slot-{i:03d}: empty", "newText": f"slot-{i:03d}: done"}
                result = await session.call_tool("edit_file", {"path": "slots.md", "edits": [edit]})
                if result.is_error:
                    errors.append(text_of(result))

            async with anyio.create_task_group() as group:
                for i in slots:
                    group.start_soon(edit, i)

    async with anyio.create_task_group() as group:
        for n, config in enumerate(configs):
            group.start_soon(launcher, config, range(n, EDITS, LAUNCHERS))
    assert errors == []
    lines = (root / "slots.md").read_text().splitlines()
    assert lines == [f"slot-{i:03d}: done" for i in range(EDITS)]
    assert temps(root) == []


# -- 6. nothing of ours shows up in the user's project (issue 25) -------------------------


async def test_a_project_under_git_shows_only_the_users_own_file(
    write_config, tmp_path: Path
) -> None:
    """A launcher whose memory folder and filesystem root are in a git work tree leaves
    nothing untracked but the file the client wrote: no lock marker in the root, and the
    memory folder ignores itself."""
    project = tmp_path / "project"
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    config = write_config(
        f"""\
        servers:
          memory-tools: {{}}
          filesystem:
            settings: {{roots: [{project}]}}
        """
    )
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    async with launched(config, cwd=project, env={"XDG_RUNTIME_DIR": str(runtime)}) as session:
        for tool, arguments in [
            ("write_memory", {"key": "k", "value": "v"}),
            ("memory_create", {"path": "/notes.md", "file_text": "n\n"}),
            ("write_file", {"path": "mine.txt", "content": "x"}),
            ("edit_file", {"path": "mine.txt", "edits": [{"oldText": "x", "newText": "y"}]}),
        ]:
            result = await session.call_tool(tool, arguments)
            assert not result.is_error, text_of(result)
    assert (project / "agent_memory" / "k.json").exists()
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=project,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert status == "?? mine.txt\n"
    assert not (project / LOCK_FILE_NAME).exists()


def test_nested_roots_of_two_servers_share_the_inner_roots_flock(tmp_path: Path) -> None:
    """A write through the outer root into a folder that is another server's root takes that
    root's flock too, though no marker was left in it (it is kept in the per-user registry)."""
    outer = tmp_path / "outer"
    inner = outer / "inner"
    inner.mkdir(parents=True)
    filesystem.FileSystem(Jail([inner]), filesystem.Settings(roots=[inner]))  # registers inner
    assert not (inner / LOCK_FILE_NAME).exists()
    fs = filesystem.FileSystem(Jail([outer]), filesystem.Settings(roots=[outer]))
    done = threading.Event()
    worker = threading.Thread(target=lambda: (fs.write_file("inner/f.txt", "x"), done.set()))
    with flock_held(inner):
        worker.start()
        assert not done.wait(1.0)  # waits for the inner root's lock (the other server's write)
        assert not (inner / "f.txt").exists()
    worker.join(30)
    assert done.is_set()
    assert (inner / "f.txt").read_text() == "x"
