"""Shared fixtures: write a launcher config, spawn ``dpt-launch`` and talk to it with the official mcp client."""

from __future__ import annotations

import contextlib
import ctypes
import os
import stat
import sys
import tempfile
import textwrap
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import IO

import pytest

REPO = Path(__file__).resolve().parent.parent
SPAWN_TIMEOUT = 60


def launcher_command() -> list[str]:
    """Run the launcher with this interpreter, so tests use the installed package."""
    return [sys.executable, "-m", "doc_processing_std_tools.launcher.cli"]


def pytest_configure(config: pytest.Config) -> None:
    """Compile the package and the test helpers once, before any launcher is spawned.

    Where ``PYTHONDONTWRITEBYTECODE`` is set (this project's machines set it), no process
    caches the bytecode of the editable package, so each of the ~300 launchers a run spawns
    would compile it from source again: ~0.08 s of CPU each (compileall writes the caches
    regardless; an edited file is compiled again the next time).
    """
    if hasattr(config, "workerinput"):  # an xdist worker: the controller did it
        return
    import compileall

    here = Path(__file__).resolve().parent
    for folder in (here.parent / "doc_processing_std_tools", here):
        compileall.compile_dir(folder, quiet=2)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: three workers per two cores. Most tests wait on the launchers and servers
    they spawn, so two workers on two cores left a core idle a third of the time (measured
    on 2 cores: -n 2 3:31, -n 3 3:00, -n 4 3:08)."""
    return max(2, (os.cpu_count() or 1) * 3 // 2)


@pytest.fixture(autouse=True)
def _environment_restored() -> Iterator[None]:
    """Each test starts from the environment the run started with: ``main()`` run in-process
    sets FASTMCP_LOG_LEVEL and the like, which later launchers spawned by this worker (with
    xdist, any test's) would inherit."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture
def dispatch_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool, bool]]:
    """popoto's ``dispatch()`` calls, as they happen: (tool, process lock held, on the main
    thread, i.e. the event loop rather than a worker thread)."""
    import threading

    popoto_mcp = pytest.importorskip("popoto.integrations.mcp_server")
    from doc_processing_std_tools import locking

    seen: list[tuple[str, bool, bool]] = []
    real_dispatch = popoto_mcp.dispatch

    def spy(name, arguments=None, service=None):
        on_loop = threading.current_thread() is threading.main_thread()
        seen.append((name, locking.PROCESS_LOCK.locked(), on_loop))
        return real_dispatch(name, arguments, service)

    monkeypatch.setattr(popoto_mcp, "dispatch", spy)
    return seen


@pytest.fixture
def write_config(tmp_path: Path):
    """Write YAML text (dedented) to a config file in tmp_path and return its path."""

    def write(text: str, name: str = "tools.yaml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        return path

    return write


def _stderr_to(errlog: IO[str] | Path | None) -> contextlib.AbstractContextManager[IO[str]]:
    if isinstance(errlog, Path):
        return errlog.open("w")
    return contextlib.nullcontext(errlog) if errlog else tempfile.TemporaryFile("w+")


@asynccontextmanager
async def launched(
    config: Path,
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    list_roots_callback: object = None,
    message_handler: object = None,
    errlog: IO[str] | Path | None = None,
    sampling_callback: object = None,
    elicitation_callback: object = None,
    logging_callback: object = None,
    sampling_capabilities: object = None,
    args: tuple[str, ...] = (),
) -> AsyncIterator[object]:
    """A ClientSession connected over stdio to a spawned ``dpt-launch --config config``
    (declaring MCP roots, sampling or elicitation when their callback is given). Its stderr
    goes to *errlog*, a file object or a path to write, when given; else it is dropped.
    *args* follow ``--config`` (``--profile NAME``)."""
    import anyio
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(
        command=launcher_command()[0],
        args=[*launcher_command()[1:], "--config", str(config), *args],
        env={**os.environ, **(env or {})},
        cwd=str(cwd or config.parent),
    )
    with (
        _stderr_to(errlog) as log,
        anyio.fail_after(SPAWN_TIMEOUT),
    ):
        async with (
            stdio_client(params, errlog=log) as (read, write),
            ClientSession(
                read,
                write,
                list_roots_callback=list_roots_callback,  # type: ignore[arg-type]
                message_handler=message_handler,  # type: ignore[arg-type]
                sampling_callback=sampling_callback,  # type: ignore[arg-type]
                elicitation_callback=elicitation_callback,  # type: ignore[arg-type]
                logging_callback=logging_callback,  # type: ignore[arg-type]
                sampling_capabilities=sampling_capabilities,  # type: ignore[arg-type]
            ) as session,
        ):
            await session.initialize()
            yield session


def snapshot(base: Path, skip: tuple[Path, ...] = ()) -> dict[str, tuple]:
    """Everything under *base* except the *skip* subtrees: type, content or link, mode."""
    state: dict[str, tuple] = {}
    for folder, dirs, files in os.walk(base):
        here = Path(folder)
        dirs[:] = [d for d in dirs if here / d not in skip]
        for name in [*dirs, *files]:
            path = here / name
            if path in skip:
                continue
            info = os.lstat(path)
            if stat.S_ISLNK(info.st_mode):
                state[str(path)] = ("link", os.readlink(path))
            elif stat.S_ISDIR(info.st_mode):
                state[str(path)] = ("dir", stat.S_IMODE(info.st_mode))
            else:
                state[str(path)] = ("file", path.read_bytes(), stat.S_IMODE(info.st_mode))
    return state


def exchange(a: Path, b: Path) -> None:
    """Atomically swap two names (renameat2 RENAME_EXCHANGE); fall back to two renames."""
    func = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if func is not None and func(-100, os.fsencode(a), -100, os.fsencode(b), 2) == 0:
        return
    spare = a.with_name(a.name + ".spare")
    os.rename(a, spare)
    os.rename(b, a)
    os.rename(spare, b)


def text_of(result: object) -> str:
    """The joined text content of a CallToolResult."""
    return "".join(getattr(block, "text", "") for block in result.content)  # type: ignore[attr-defined]


@pytest.fixture(scope="session", autouse=True)
def _private_user_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Per-user data (popoto-memory's default embedded store) goes to a session temp folder,
    never the real ~/.local/share; spawned launchers inherit it. Tests that care set their own."""
    folder = tmp_path_factory.mktemp("xdg-data")
    saved = os.environ.get("XDG_DATA_HOME")
    os.environ["XDG_DATA_HOME"] = str(folder)
    try:
        yield folder
    finally:
        if saved is None:
            os.environ.pop("XDG_DATA_HOME", None)
        else:
            os.environ["XDG_DATA_HOME"] = saved


@pytest.fixture(scope="session", autouse=True)
def _private_user_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Per-user cache (memory-tools' saved search indexes) goes to a session temp folder."""
    folder = tmp_path_factory.mktemp("xdg-cache")
    saved = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(folder)
    try:
        yield folder
    finally:
        if saved is None:
            os.environ.pop("XDG_CACHE_HOME", None)
        else:
            os.environ["XDG_CACHE_HOME"] = saved


@pytest.fixture
def clean_deep(tmp_path: Path) -> Iterator[None]:
    """Remove the test's folders with our own rmtree: pytest's shutil.rmtree cannot remove a
    chain thousands of folders deep (RecursionError), and would fail on it in every later run."""
    from tree_helpers import remove_subfolders

    yield
    remove_subfolders(tmp_path)


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One redis-server for this test session (or xdist worker): ``redis://127.0.0.1:PORT/0``.
    Tests keep apart by namespace (see ``memory_backend``)."""
    from redis_helpers import RedisUnavailable, start_redis

    try:
        proc, port = start_redis(tmp_path_factory.mktemp("redis"))
    except RedisUnavailable as exc:
        pytest.skip(str(exc))
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


_NAMESPACES = iter(range(1, 1 << 30))


@pytest.fixture(params=["folder", "redis"])
def memory_backend(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, object]:
    """memory-tools settings for each backend: a folder in tmp_path, or a fresh namespace of the
    session's redis-server. Tests marked ``folder_only`` (symlinks, permissions, the disk's own
    failures: things a Redis store has no counterpart for) run on the folder only."""
    if request.param == "folder":
        return {"memory_dir": tmp_path / "mem"}
    marker = request.node.get_closest_marker("folder_only")
    if marker is not None:
        pytest.skip(f"folder only: {marker.args[0] if marker.args else 'a folder feature'}")
    url = request.getfixturevalue("redis_url")
    return {"backend": "redis", "url": url, "namespace": f"t{os.getpid()}-{next(_NAMESPACES)}"}
