"""Real clients start servers from ``/`` or ``$HOME``: only the client's MCP roots are served.

Every test spawns a real process (``dpt-launch`` or a server module) and talks to
it with the official ``mcp`` client, which declares roots when it is given a
``list_roots_callback``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from helpers.launch import SPAWN_TIMEOUT, http_launcher, launched, launcher_command, text_of

# The roots capability is deprecated in the 2026-07-28 protocol; clients still use it.
pytestmark = pytest.mark.filterwarnings("ignore:The roots capability is deprecated")

APP = "doc-processing-std-tools"
NO_ROOT_FIX = "No folder is allowed"


class Roots:
    """The client's roots, changeable mid-session; counts the server's roots/list requests."""

    def __init__(self, *folders: Path) -> None:
        self.folders = list(folders)
        self.asked = 0

    async def __call__(self, context: Any) -> Any:
        import mcp_types as types

        self.asked += 1
        return types.ListRootsResult(
            roots=[types.Root(uri=folder.as_uri(), name=folder.name) for folder in self.folders]
        )


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """Two projects, a fake home, a data home; no DPTTOOLS_* variables."""
    for name in ("DPTTOOLS_MEMORY_DIR", "DPTTOOLS_FS_ROOTS", "DPTTOOLS_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    places = {name: tmp_path / name for name in ("a", "b", "home", "data", "conf")}
    for folder in places.values():
        folder.mkdir()
    (places["a"] / "a.txt").write_text("in project a")
    (places["b"] / "b.txt").write_text("in project b")
    (places["home"] / "secret.txt").write_text("home secret")
    config = places["conf"] / "tools.yaml"
    # configs/tools.yaml, without popoto-memory
    config.write_text(
        "name: roots-test\n"
        "transport: stdio\n"
        "servers:\n"
        "  memory:\n"
        "    server: memory-tools\n"
        "    settings: {}\n"
        "  filesystem:\n"
        "    settings:\n"
        "      read_only: false\n"
    )
    places["config"] = config
    return places


def _env(world: dict[str, Path]) -> dict[str, str]:
    return {
        "HOME": str(world["home"]),
        "XDG_DATA_HOME": str(world["data"]),
        "FASTMCP_LOG_LEVEL": "WARNING",
    }


def _user_memory(world: dict[str, Path]) -> Path:
    return world["data"] / APP / "agent_memory"


@asynccontextmanager
async def served(
    module: str, *, cwd: Path, env: dict[str, str], roots: Roots | None = None
) -> AsyncIterator[Any]:
    """A ClientSession over stdio to ``python -m module`` started in *cwd*."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(
        command=sys.executable, args=["-m", module], env={**os.environ, **env}, cwd=str(cwd)
    )
    with tempfile.TemporaryFile("w+") as errlog, anyio.fail_after(SPAWN_TIMEOUT):
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write, list_roots_callback=roots) as session,
        ):
            session.init_result = await session.initialize()  # type: ignore[attr-defined]
            yield session


async def call(session: Any, tool: str, **args: Any) -> tuple[bool, str]:
    result = await session.call_tool(tool, args)
    return bool(result.is_error), text_of(result)


async def ok(session: Any, tool: str, **args: Any) -> str:
    is_error, text = await call(session, tool, **args)
    assert not is_error, text
    return text


async def refused(session: Any, tool: str, **args: Any) -> str:
    is_error, text = await call(session, tool, **args)
    assert is_error, text
    assert "Traceback" not in text
    return text


def _working_dir(world: dict[str, Path], where: str) -> Path:
    return Path("/") if where == "root" else world["home"]


@pytest.mark.parametrize("where", ["root", pytest.param("home", marks=pytest.mark.slow)])
async def test_launcher_from_root_or_home_serves_only_the_client_roots(
    world: dict[str, Path], where: str
) -> None:
    before = os.path.lexists("/agent_memory")
    roots = Roots(world["a"])
    async with launched(
        world["config"], env=_env(world), cwd=_working_dir(world, where), list_roots_callback=roots
    ) as session:
        allowed = await ok(session, "list_allowed_directories")
        assert str(world["a"]) in allowed
        assert str(world["home"]) not in allowed and "\n/\n" not in allowed + "\n"
        assert await ok(session, "read_text_file", path="a.txt") == "in project a"
        assert await ok(session, "read_text_file", path=str(world["a"] / "a.txt")) == "in project a"
        await refused(session, "read_text_file", path=str(world["home"] / "secret.txt"))
        await refused(session, "read_text_file", path="/etc/passwd")
        await refused(session, "list_directory", path="/")
        await ok(session, "write_file", path="new.txt", content="written")
        assert (world["a"] / "new.txt").read_text() == "written"

        # memory-tools follows the client's first root
        await ok(session, "write_memory", key="k", value="v")
        assert (world["a"] / "agent_memory" / "k.json").is_file()

        # the client moves its roots: the servers follow
        roots.folders = [world["b"]]
        await session.send_roots_list_changed()
        with anyio.fail_after(10):
            while str(world["b"]) not in await ok(session, "list_allowed_directories"):
                await anyio.sleep(0.05)
        allowed = await ok(session, "list_allowed_directories")
        assert str(world["a"]) not in allowed
        await refused(session, "read_text_file", path=str(world["a"] / "a.txt"))
        assert await ok(session, "read_text_file", path="b.txt") == "in project b"
        await ok(session, "write_memory", key="k2", value="v2")
        assert (world["b"] / "agent_memory" / "k2.json").is_file()
        assert not (world["a"] / "agent_memory" / "k2.json").exists()
        assert json.loads(await ok(session, "list_memory_keys")) == ["k2"]
    assert os.path.lexists("/agent_memory") == before
    assert not (world["home"] / "agent_memory").exists()
    assert not _user_memory(world).exists()  # the client's root was used instead


@pytest.mark.parametrize("where", ["root", pytest.param("home", marks=pytest.mark.slow)])
async def test_a_client_without_roots_gets_no_folder_and_the_fix(
    world: dict[str, Path], where: str
) -> None:
    before = os.path.lexists("/agent_memory")
    async with launched(
        world["config"], env=_env(world), cwd=_working_dir(world, where)
    ) as session:
        allowed = await ok(session, "list_allowed_directories")
        assert "No directory is allowed" in allowed
        fix = allowed.splitlines()[-1]
        assert fix.startswith(NO_ROOT_FIX)
        assert "DPTTOOLS_FS_ROOTS" in fix and "'roots'" in fix and "MCP roots" in fix
        for tool, args in [
            ("read_text_file", {"path": "/etc/passwd"}),
            ("read_text_file", {"path": "secret.txt"}),
            ("list_directory", {"path": "/"}),
            ("directory_tree", {"path": "."}),
            ("search_files", {"path": "/", "pattern": "*"}),
            ("get_file_info", {"path": str(world["home"])}),
            ("write_file", {"path": "x.txt", "content": "x"}),
            ("create_directory", {"path": "made"}),
            ("move_file", {"source": "secret.txt", "destination": "moved.txt"}),
            ("read_multiple_files", {"paths": ["/etc/passwd", "secret.txt"]}),
            ("read_media_file", {"path": "/etc/passwd"}),
            ("list_directory_with_sizes", {"path": "/"}),
            ("edit_file", {"path": "secret.txt", "edits": [{"oldText": "h", "newText": "x"}]}),
        ]:
            assert await refused(session, tool, **args) == fix, tool

        # memory lands in the per-user data folder
        await ok(session, "write_memory", key="k", value="v")
        assert (_user_memory(world) / "k.json").is_file()
    assert os.path.lexists("/agent_memory") == before
    assert not (world["home"] / "agent_memory").exists()
    assert not (world["home"] / "x.txt").exists() and not (world["home"] / "made").exists()


@pytest.mark.slow
async def test_check_says_where_roots_and_memory_come_from(world: dict[str, Path]) -> None:
    result = subprocess.run(
        [*launcher_command(), "--config", str(world["config"]), "--check"],
        cwd="/",
        env={**os.environ, **_env(world), "COLUMNS": "400"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    out = " ".join(result.stdout.split())
    assert "none yet" in out and "filesystem root" in out
    assert str(_user_memory(world)) in out
    assert not _user_memory(world).exists()  # --check creates nothing


@pytest.mark.slow
async def test_memory_tools_alone_from_root_uses_the_data_home(world: dict[str, Path]) -> None:
    async with served("doc_processing_std_tools.memory", cwd=Path("/"), env=_env(world)) as s:
        assert str(_user_memory(world)) in s.init_result.instructions
        await ok(s, "write_memory", key="alone", value="v")
        await ok(s, "memory_create", path="/notes/todo.md", file_text="x\n")
    assert json.loads((_user_memory(world) / "alone.json").read_text())["value"] == "v"
    assert (_user_memory(world) / "notes" / "todo.md").is_file()


async def test_memory_tools_alone_from_root_uses_the_client_root(world: dict[str, Path]) -> None:
    roots = Roots(world["a"], world["b"])
    async with served(
        "doc_processing_std_tools.memory", cwd=Path("/"), env=_env(world), roots=roots
    ) as s:
        assert "first folder your client shares" in s.init_result.instructions
        await ok(s, "write_memory", key="rooted", value="v")
        assert await ok(s, "read_memory", key="rooted") == "v"
    assert (world["a"] / "agent_memory" / "rooted.json").is_file()
    assert not (world["b"] / "agent_memory").exists()
    assert not _user_memory(world).exists()


@pytest.mark.slow
async def test_an_unusable_memory_folder_in_the_client_root_is_refused(
    world: dict[str, Path],
) -> None:
    (world["a"] / "agent_memory").write_text("a file, not a folder")
    async with served(
        "doc_processing_std_tools.memory", cwd=Path("/"), env=_env(world), roots=Roots(world["a"])
    ) as s:
        for tool, args in [
            ("write_memory", {"key": "k", "value": "v"}),
            ("read_memory", {"key": "k"}),
            ("list_memory_keys", {}),
            ("memory_view", {"path": "/"}),
            ("memory_create", {"path": "/x.md", "file_text": "x"}),
        ]:
            text = await refused(s, tool, **args)
            assert "is not a folder" in text and "DPTTOOLS_MEMORY_DIR" in text, text
    assert (world["a"] / "agent_memory").read_text() == "a file, not a folder"
    assert not _user_memory(world).exists()


@pytest.mark.slow
async def test_filesystem_alone_caches_roots_until_list_changed(world: dict[str, Path]) -> None:
    # Served alone, the server sees the client's notifications: roots/list is asked
    # once per change, not once per call.
    roots = Roots(world["a"])
    async with served(
        "doc_processing_std_tools.filesystem", cwd=Path("/"), env=_env(world), roots=roots
    ) as s:
        for _ in range(3):
            assert await ok(s, "read_text_file", path="a.txt") == "in project a"
        assert roots.asked == 1
        roots.folders = [world["b"]]
        await s.send_roots_list_changed()
        with anyio.fail_after(10):
            while (await call(s, "read_text_file", path="b.txt"))[1] != "in project b":
                await anyio.sleep(0.05)
        await refused(s, "read_text_file", path=str(world["a"] / "a.txt"))
        assert roots.asked == 2


@pytest.mark.slow
async def test_http_sessions_keep_their_own_roots(world: dict[str, Path]) -> None:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    with http_launcher(
        world["config"],
        args=("--transport", "http", "--log-level", "INFO"),
        cwd="/",
        env=_env(world),
    ) as daemon:
        url = daemon.url

        async def session_with(roots: Roots | None, task_status: Any) -> None:
            async with (
                streamable_http_client(url) as (read, write, *_),
                ClientSession(read, write, list_roots_callback=roots) as session,
            ):
                await session.initialize()
                task_status.started(session)
                await anyio.sleep_forever()

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                one = await tg.start(session_with, Roots(world["a"]))
                two = await tg.start(session_with, Roots(world["b"]))
                three = await tg.start(session_with, None)
                for _ in range(2):  # interleaved: a cache must never mix the sessions up
                    assert await ok(one, "read_text_file", path="a.txt") == "in project a"
                    assert await ok(two, "read_text_file", path="b.txt") == "in project b"
                    await refused(one, "read_text_file", path=str(world["b"] / "b.txt"))
                    await refused(two, "read_text_file", path=str(world["a"] / "a.txt"))
                    assert NO_ROOT_FIX in await refused(
                        three, "read_text_file", path=str(world["a"] / "a.txt")
                    )
                await ok(one, "write_memory", key="one", value="1")
                await ok(two, "write_memory", key="two", value="2")
                await ok(three, "write_memory", key="three", value="3")
                tg.cancel_scope.cancel()
        assert (world["a"] / "agent_memory" / "one.json").is_file()
        assert (world["b"] / "agent_memory" / "two.json").is_file()
        assert (_user_memory(world) / "three.json").is_file()


@pytest.mark.slow
async def test_roots_that_cannot_be_listed_do_not_fall_back_to_the_working_directory(
    world: dict[str, Path],
) -> None:
    import mcp_types as types

    async def broken(context: Any) -> Any:
        return types.ErrorData(code=-32603, message="roots are unavailable")

    # started in a project folder, which would be the last resort: a client whose
    # roots fail must get an error, not the working directory
    async with launched(
        world["config"], env=_env(world), cwd=world["b"], list_roots_callback=broken
    ) as session:
        text = await refused(session, "read_text_file", path="b.txt")
        assert "did not list them" in text and "roots are unavailable" in text
