"""Tests of the popoto-memory server: contract, end to end on a real redis-server, embedded backend."""

from __future__ import annotations

import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import anyio
import pytest

pytest.importorskip("popoto")

import redis
from fastmcp import Client
from popoto.integrations.mcp_server import (
    SERVER_INSTRUCTIONS,
    dispatch,
    tool_definitions,
)
from pydantic import ValidationError

from doc_processing_std_tools import locking
from doc_processing_std_tools import popoto_memory as pm
from doc_processing_std_tools.embedded_redis import (
    EmbeddedRedis,
    EmbeddedRedisError,
    _pid_alive,
    free_port,
)

REDIS_SERVER = shutil.which("redis-server")
needs_redis = pytest.mark.skipif(REDIS_SERVER is None, reason="needs redis-server on PATH")
REPO = Path(__file__).resolve().parents[1]


# -- fixtures -------------------------------------------------------------------


@pytest.fixture(scope="module")
def redis_port(tmp_path_factory):
    """A throw-away redis-server on a free port (no persistence)."""
    if REDIS_SERVER is None:
        pytest.skip("needs redis-server on PATH")
    port = free_port()
    workdir = tmp_path_factory.mktemp("redis")
    proc = subprocess.Popen(
        [
            REDIS_SERVER,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(workdir),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = redis.Redis(port=port, socket_connect_timeout=1)
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail("test redis-server did not start")
            time.sleep(0.01)
    yield port
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture
def redis_url(redis_port):
    redis.Redis(port=redis_port, db=1).flushdb()
    return f"redis://127.0.0.1:{redis_port}/1"


@pytest.fixture
async def client(redis_url):
    server = pm.create_server(pm.Settings(url=redis_url, agent_id="pytestagent"))
    async with Client(server) as c:
        c.server_under_test = server
        yield c


async def call(c: Client, name: str, args: dict | None = None) -> tuple[bool, str]:
    with anyio.fail_after(20):
        result = await c.call_tool(name, args or {}, raise_on_error=False)
    assert len(result.content) == 1 and result.content[0].type == "text"
    return result.is_error, result.content[0].text


def keys_in(text: str) -> list[str]:
    return re.findall(r"\[key: ([^\]]+)\]", text)


def closed_port() -> int:
    return free_port()  # nothing listens there once the probe socket is closed


# -- contract -------------------------------------------------------------------


async def test_tools_list_is_popotos(tmp_path):
    server = pm.create_server(pm.Settings(url=f"redis://127.0.0.1:{closed_port()}/1"))
    assert server.name == "popoto-memory"
    assert server.instructions == SERVER_INSTRUCTIONS
    async with Client(server) as c:
        listed = await c.list_tools()
    assert [t.name for t in listed] == [
        "memory_search",
        "memory_save",
        "memory_feedback",
        "memory_status",
    ]
    ours = [
        {"name": t.name, "description": t.description, "inputSchema": t.input_schema}
        for t in listed
    ]
    assert ours == tool_definitions()
    read_only = {t.name for t in listed if t.annotations and t.annotations.read_only_hint}
    assert read_only == {"memory_search", "memory_status"}


def test_module_imports_without_popoto():
    code = textwrap.dedent(
        """
        import sys
        import doc_processing_std_tools.popoto_memory as m
        rows = dict(m.describe(m.Settings()))
        assert "popoto" not in sys.modules, "popoto imported eagerly"
        assert "fastmcp" not in sys.modules, "fastmcp imported eagerly"
        sys.modules["popoto"] = None  # as if not installed
        from doc_processing_std_tools.servers import ServerLoadError
        try:
            m.create_server(m.Settings())
        except ServerLoadError as exc:
            assert exc.extra == "popoto", exc.extra
            print("ERR", exc)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, cwd=REPO
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == (
        "ERR popoto-memory needs the optional dependency 'popoto': "
        "pip install 'doc-processing-std-tools[popoto]'"
    )


def test_contract_attributes():
    assert pm.ONE_PER_PROCESS is True
    assert pm.EXTRA == "popoto"
    assert issubclass(pm.Settings, pm.ServerSettings)
    with pytest.raises(ValidationError, match="extra"):
        pm.Settings(nope=1)


# -- end to end on a real redis-server -----------------------------------------


@needs_redis
async def test_save_search_status(client, redis_url):
    err, text = await call(client, "memory_save", {"content": "Deploys are blue-green via Argo."})
    assert (err, text) == (False, "Saved 1 memory record(s).")
    err, _ = await call(client, "memory_save", {"content": "The cafeteria closes at 3pm."})
    assert not err

    err, text = await call(client, "memory_search", {"query": "Argo blue-green"})
    assert not err
    assert text.startswith("1 memory result(s):") or text.startswith("2 memory result(s):")
    assert "Deploys are blue-green via Argo." in text.splitlines()[1]
    assert keys_in(text)[0].startswith("DefaultMemory:pytestagent:")

    err, text = await call(client, "memory_status")
    assert not err
    assert "agent: pytestagent" in text
    assert "records: 2" in text
    assert f"store: redis at {redis_url}" in text


@needs_redis
async def test_bad_arguments_give_popotos_text(client, redis_url):
    cases = [
        ("memory_search", {"query": ""}),
        ("memory_search", {"query": "x", "limit": "abc"}),
        ("memory_save", {"content": "x", "importance": 2}),
        ("memory_save", {"content": 123}),
        ("memory_feedback", {"key": "DefaultMemory:nope"}),
        ("memory_feedback", {"key": "k", "outcome": "bad"}),
    ]
    got = [await call(client, name, args) for name, args in cases]
    assert got[0] == (True, "memory_search needs a non-empty 'query'.")
    assert got[2] == (True, "memory_save 'importance' must be between 0 and 1.")
    assert got[4] == (True, "No memory found for key 'DefaultMemory:nope'.")
    # byte-for-byte what popoto's own dispatch answers
    runtime = client.server_under_test.popoto_runtime
    expected = [
        (r["is_error"], r["text"])
        for r in (dispatch(n, a, runtime.new_service()) for n, a in cases)
    ]
    assert got == expected
    assert all(err for err, _ in got)


@needs_redis
async def test_feedback_changes_confidence(client):
    from popoto.fields.confidence_field import ConfidenceField
    from popoto.recipes import DefaultMemory

    await call(client, "memory_save", {"content": "The deploy script lives in ops/deploy.sh"})
    await call(client, "memory_save", {"content": "The deploy script lives in tools/release.py"})
    _, text = await call(client, "memory_search", {"query": "deploy script"})
    first, second = keys_in(text)

    err, text = await call(client, "memory_feedback", {"key": first, "outcome": "contradicted"})
    assert (err, text) == (False, f"Recorded outcome 'contradicted' for {first}.")
    err, _ = await call(client, "memory_feedback", {"key": second, "outcome": "acted"})
    assert not err

    def confidence(key: str) -> float:
        (record,) = DefaultMemory.query.get_many([key], skip_none=True)
        return ConfidenceField.get_confidence(record, "confidence")

    assert confidence(first) < 0.5 < confidence(second)
    # popoto's MCP search ranks on relevance alone (score_weights {"relevance": 1.0}),
    # so feedback changes confidence, not this ranking; both are still found
    _, text = await call(client, "memory_search", {"query": "deploy script"})
    assert sorted(keys_in(text)) == sorted([first, second])


@needs_redis
async def test_write_tools_hold_the_process_lock(client, monkeypatch):
    """save/feedback run dispatch under PROCESS_LOCK in a worker thread; search/status don't lock."""
    import popoto.integrations.mcp_server as popoto_mcp

    seen = []
    real_dispatch = popoto_mcp.dispatch

    def spy(name, arguments=None, service=None):
        on_loop = threading.current_thread() is threading.main_thread()
        seen.append((name, locking.PROCESS_LOCK.locked(), on_loop))
        return real_dispatch(name, arguments, service)

    monkeypatch.setattr(popoto_mcp, "dispatch", spy)
    _, text = await call(client, "memory_save", {"content": "written under the lock"})
    _, text = await call(client, "memory_search", {"query": "written under the lock"})
    await call(client, "memory_feedback", {"key": keys_in(text)[0], "outcome": "used"})
    await call(client, "memory_status")
    assert seen == [
        ("memory_save", True, False),
        ("memory_search", False, False),
        ("memory_feedback", True, False),
        ("memory_status", False, False),
    ]
    assert not locking.PROCESS_LOCK.locked()


async def test_unreachable_backend_is_an_error():
    port = closed_port()
    server = pm.create_server(pm.Settings(url=f"redis://:secret@127.0.0.1:{port}/1"))
    async with Client(server) as c:
        for name, args in [
            ("memory_search", {"query": "deploy"}),
            ("memory_save", {"content": "x"}),
            ("memory_feedback", {"key": "DefaultMemory:x"}),
        ]:
            err, text = await call(c, name, args)
            assert err, text
            assert f"cannot reach redis://:***@127.0.0.1:{port}/1" in text
            assert "Start Redis or Valkey there" in text
            assert "secret" not in text
        err, text = await call(c, "memory_status")
    assert err  # popoto's own verdict, passed through
    assert "Memory is unavailable" in text
    assert f"store: redis at redis://:***@127.0.0.1:{port}/1 (url from settings)" in text
    assert "fix: Start Redis or Valkey there" in text
    assert "secret" not in text


async def test_one_server_per_process(tmp_path):
    url = f"redis://127.0.0.1:{closed_port()}/1"
    first, second = pm.create_server(pm.Settings(url=url)), pm.create_server(pm.Settings(url=url))
    async with Client(first):
        with pytest.raises(RuntimeError, match="already running in this process"):
            async with Client(second):
                pass
    async with Client(second) as c:  # the first one has exited: allowed now
        assert len(await c.list_tools()) == 4


# -- settings and describe ------------------------------------------------------


def test_settings_resolution(tmp_path):
    s = pm.Settings.model_validate({}, context={"base_dir": tmp_path})
    assert s.data_dir == tmp_path / ".dpt" / "popoto-redis"
    r = pm.resolve(s, environ={})
    assert (r.backend, r.backend_source) == ("embedded", "default")
    assert r.agent_source == (
        f"default: name of the launcher's working directory, {Path.cwd().name}"
    )

    env = {"REDIS_URL": "redis://h:6379/3"}
    r = pm.resolve(pm.Settings(), environ=env)
    assert (r.backend, r.url, r.env["POPOTO_MEMORY_URL"]) == (
        "redis",
        env["REDIS_URL"],
        env["REDIS_URL"],
    )
    env = {"POPOTO_MEMORY_URL": "redis://a:1/2", "REDIS_URL": "redis://b:1/3"}
    assert pm.resolve(pm.Settings(), environ=env).url == "redis://a:1/2"
    r = pm.resolve(pm.Settings(url="redis://c:1/4", agent_id="me"), environ=env)
    assert (r.url, r.url_source, r.env["POPOTO_MEMORY_AGENT_ID"]) == (
        "redis://c:1/4",
        "settings",
        "me",
    )
    r = pm.resolve(pm.Settings(backend="embedded"), environ=env)
    assert r.backend == "embedded" and r.notes
    r = pm.resolve(
        pm.Settings(max_items=9, ingest="heuristic"), environ={"POPOTO_MEMORY_MAX_TOKENS": "50"}
    )
    assert (r.env["POPOTO_MEMORY_MAX_ITEMS"], r.env["POPOTO_MEMORY_INGEST"]) == ("9", "heuristic")
    assert r.env["POPOTO_MEMORY_MAX_TOKENS"] == "50"  # unmapped variables keep working
    r = pm.resolve(pm.Settings(url="postgresql://u:p@h/db"), environ={})
    assert r.backend == "postgres" and r.env["POPOTO_POSTGRES_URL"] == "postgresql://u:p@h/db"

    for bad in (
        {"backend": "redis", "port": 7000},
        {"url": "redis://h:1/1", "data_dir": "x"},
        {"backend": "embedded", "url": "redis://h:1/1"},
        {"backend": "redis", "url": "postgresql://h/db"},
        {"url": "unix:///tmp/redis.sock"},
        {"port": 0},
    ):
        with pytest.raises(ValidationError):
            pm.Settings(**bad)


def test_describe(monkeypatch, tmp_path):
    monkeypatch.delenv("POPOTO_MEMORY_URL", raising=False)
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.delenv("POPOTO_BACKEND", raising=False)
    monkeypatch.delenv("POPOTO_MEMORY_AGENT_ID", raising=False)
    rows = dict(
        pm.describe(pm.Settings.model_validate({"port": 7001}, context={"base_dir": tmp_path}))
    )
    assert rows["backend"].startswith("embedded")
    assert rows["url"] == "redis://:***@127.0.0.1:7001/1"
    assert rows["data_dir"] == str(tmp_path / ".dpt" / "popoto-redis")
    assert (
        rows["agent_id"] == f"default: name of the launcher's working directory, {Path.cwd().name}"
    )
    rows = dict(pm.describe(pm.Settings(url="redis://:hunter2@db:6379/2", agent_id="proj")))
    assert rows["url"] == "redis://:***@db:6379/2 (from settings)"
    assert rows["agent_id"] == "proj (from settings)"
    monkeypatch.setenv("POPOTO_MEMORY_AGENT_ID", "envproj")
    assert dict(pm.describe(pm.Settings()))["agent_id"] == (
        "envproj (from environment POPOTO_MEMORY_AGENT_ID)"
    )


# -- embedded backend -----------------------------------------------------------


@needs_redis
async def test_embedded_persists_across_restarts_and_stops(tmp_path):
    data_dir = tmp_path / "store"
    settings = pm.Settings(backend="embedded", data_dir=str(data_dir), agent_id="emb")
    server = pm.create_server(settings)
    async with Client(server) as c:
        emb = server.popoto_runtime.embedded
        pid = emb.pid
        assert emb.is_ours(pid)
        err, _ = await call(c, "memory_save", {"content": "Embedded memories survive restarts."})
        assert not err
        err, text = await call(c, "memory_status")
        assert not err, text
        assert f"store: embedded redis-server at redis://:***@127.0.0.1:{emb.port}/1" in text
    assert not _pid_alive(pid), "redis-server left running after the lifespan exited"
    assert not (data_dir / "redis.pid").exists()
    password = (data_dir / "password").read_text()
    assert stat.S_IMODE((data_dir / "password").stat().st_mode) == 0o600
    assert password.strip() not in (data_dir / "redis.log").read_text()

    server = pm.create_server(settings)
    async with Client(server) as c:
        pid2 = server.popoto_runtime.embedded.pid
        err, text = await call(c, "memory_search", {"query": "embedded memories restarts"})
        assert not err
        assert "Embedded memories survive restarts." in text
    assert not _pid_alive(pid2)
    assert (data_dir / "password").read_text() == password  # reused, not regenerated


_OWNER_SCRIPT = """
import sys
from doc_processing_std_tools.embedded_redis import EmbeddedRedis
e = EmbeddedRedis(sys.argv[1], die_with_parent=sys.argv[2] == "1")
e.start()
print(e.pid, flush=True)
sys.stdin.read()  # until killed
"""


def _start_owner(data_dir: Path, die_with_parent: bool) -> tuple[subprocess.Popen, int]:
    owner = subprocess.Popen(
        [sys.executable, "-c", _OWNER_SCRIPT, str(data_dir), "1" if die_with_parent else "0"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    line = owner.stdout.readline()
    assert line.strip().isdigit(), f"owner printed {line!r}"
    return owner, int(line)


def _wait_gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while _pid_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@needs_redis
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_embedded_redis_dies_with_a_killed_owner(tmp_path):
    owner, pid = _start_owner(tmp_path / "store", die_with_parent=True)
    try:
        assert _pid_alive(pid)
        owner.kill()
        owner.wait(timeout=10)
        assert _wait_gone(pid), "redis-server outlived its SIGKILLed owner"
    finally:
        if _pid_alive(pid):
            os.kill(pid, signal.SIGKILL)


@needs_redis
async def test_embedded_stale_server_is_stopped_and_data_kept(tmp_path):
    data_dir = tmp_path / "store"
    owner, stale_pid = _start_owner(data_dir, die_with_parent=False)
    try:
        stale = EmbeddedRedis(data_dir)
        stale.port = int(re.search(r"^port (\d+)$", (data_dir / "redis.conf").read_text(), re.M)[1])
        redis.Redis.from_url(stale.url()).set("left-behind", "yes")
        owner.kill()  # the owner dies, its redis-server (no PDEATHSIG) stays
        owner.wait(timeout=10)
        assert stale.is_ours(stale_pid)

        server = pm.create_server(pm.Settings(data_dir=str(data_dir), agent_id="stale"))
        async with Client(server) as c:
            assert not _pid_alive(stale_pid), "the stale redis-server was not stopped"
            emb = server.popoto_runtime.embedded
            assert emb.pid != stale_pid
            assert redis.Redis.from_url(emb.url()).get("left-behind") == b"yes"  # AOF kept
            err, text = await call(c, "memory_status")
            assert not err, text
    finally:
        if _pid_alive(stale_pid):
            os.kill(stale_pid, signal.SIGKILL)


@needs_redis
def test_embedded_data_dir_in_use_is_refused(tmp_path):
    first = EmbeddedRedis(tmp_path / "store")
    first.prepare()
    try:
        with pytest.raises(EmbeddedRedisError, match="in use by another running process"):
            EmbeddedRedis(tmp_path / "store").prepare()
    finally:
        first.stop()
    second = EmbeddedRedis(tmp_path / "store")
    second.prepare()  # released: allowed now
    second.stop()


async def test_embedded_without_redis_server_reports_it(tmp_path, monkeypatch):
    monkeypatch.setattr("doc_processing_std_tools.embedded_redis.find_executable", lambda: None)
    server = pm.create_server(pm.Settings(data_dir=str(tmp_path / "store")))
    async with Client(server) as c:
        err, text = await call(c, "memory_search", {"query": "x"})
        assert err
        assert "the embedded backend needs a redis-server" in text
        err, text = await call(c, "memory_status")
        assert err and "needs a redis-server" in text


# -- through the launcher (spawned dpt-launch, official mcp stdio client) --------

LAUNCHER = Path(sys.executable).parent / "dpt-launch"
needs_launcher = pytest.mark.skipif(
    not (REPO / "doc_processing_std_tools" / "launcher" / "cli.py").exists()
    or not LAUNCHER.exists(),
    reason="needs the dpt-launch launcher",
)


def _launcher_params(tmp_path: Path):
    from mcp import StdioServerParameters

    (tmp_path / "tools.yaml").write_text(
        "servers:\n"
        "  memory:\n"
        "    server: popoto-memory\n"
        "    settings:\n"
        "      data_dir: ./store\n"
        "      agent_id: launched\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("POPOTO_")}
    env.pop("REDIS_URL", None)
    return StdioServerParameters(
        command=str(LAUNCHER),
        args=["--config", str(tmp_path / "tools.yaml")],
        env=env,
        cwd=str(tmp_path),
    )


def _pidfile(tmp_path: Path) -> dict:
    import json

    return json.loads((tmp_path / "store" / "redis.pid").read_text())


@needs_redis
@needs_launcher
@pytest.mark.parametrize("ending", ["eof", "sigterm", "sigkill"])
async def test_through_the_launcher(tmp_path, ending):
    from mcp import ClientSession
    from mcp.client.stdio import stdio_client

    with anyio.fail_after(30):
        async with (
            stdio_client(_launcher_params(tmp_path)) as (read, write),
            ClientSession(read, write) as session,
        ):
            init = await session.initialize()
            assert SERVER_INSTRUCTIONS in (init.instructions or "")
            names = [t.name for t in (await session.list_tools()).tools]
            assert names == ["memory_search", "memory_save", "memory_feedback", "memory_status"]
            saved = await session.call_tool("memory_save", {"content": "Launched via dpt."})
            assert not saved.is_error, saved.content[0].text
            found = await session.call_tool("memory_search", {"query": "launched dpt"})
            assert "Launched via dpt." in found.content[0].text
            pids = _pidfile(tmp_path)
            assert _pid_alive(pids["pid"])
            if ending != "eof":  # else: leaving the client closes the launcher's stdin
                sig = signal.SIGTERM if ending == "sigterm" else signal.SIGKILL
                os.kill(pids["owner"], sig)
                assert await anyio.to_thread.run_sync(_wait_gone, pids["owner"])
    assert await anyio.to_thread.run_sync(_wait_gone, pids["pid"]), (
        f"redis-server outlived the launcher ({ending})"
    )
    if ending != "sigkill":  # a clean exit removes the pidfile; a killed one can't
        assert not (tmp_path / "store" / "redis.pid").exists()


async def test_runs_alone_with_python_dash_m(tmp_path: Path) -> None:
    """``python -m doc_processing_std_tools.popoto_memory`` serves the four tools over stdio."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "doc_processing_std_tools.popoto_memory"],
        env={**os.environ, "POPOTO_MEMORY_AGENT_ID": "alone"},
        cwd=str(tmp_path),
    )
    with open(os.devnull, "w") as errlog, anyio.fail_after(60):
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            names = [tool.name for tool in (await session.list_tools()).tools]
            status = await session.call_tool("memory_status", {})
    assert names == ["memory_search", "memory_save", "memory_feedback", "memory_status"]
    assert "agent: alone" in status.content[0].text
    assert (tmp_path / ".dpt" / "popoto-redis").is_dir()  # the embedded store's default data folder


@needs_redis
@needs_launcher
async def test_launcher_contract_and_memories_survive_a_restart(tmp_path):
    """Through dpt-launch with the default (embedded) backend and no Redis started by the test:
    tools/list equals popoto's definitions; a saved memory is found after a restart."""
    from mcp import ClientSession
    from mcp.client.stdio import stdio_client

    async def session_run(action):
        with anyio.fail_after(30):
            async with (
                stdio_client(_launcher_params(tmp_path)) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                return await action(session)

    async def list_and_save(session):
        listed = (await session.list_tools()).tools
        saved = await session.call_tool("memory_save", {"content": "Restarts keep the sky blue."})
        assert not saved.is_error, saved.content[0].text
        return listed, _pidfile(tmp_path)["pid"]

    listed, first_pid = await session_run(list_and_save)
    assert [
        {"name": t.name, "description": t.description, "inputSchema": t.input_schema}
        for t in listed
    ] == tool_definitions()
    assert await anyio.to_thread.run_sync(_wait_gone, first_pid)  # the first redis-server stopped

    async def search(session):
        return await session.call_tool("memory_search", {"query": "sky blue restarts"})

    found = await session_run(search)
    assert not found.is_error
    assert "Restarts keep the sky blue." in found.content[0].text
