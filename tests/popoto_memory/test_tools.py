"""popoto-memory's tools: the contract (popoto's own definitions and texts), and calls end to end
on a real redis-server through fastmcp's in-memory client."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

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
from doc_processing_std_tools.embedded_redis import free_port
from helpers.paths import REPO
from helpers.popoto import call
from helpers.redis_server import needs_redis_server


def keys_in(text: str) -> list[str]:
    return re.findall(r"\[key: ([^\]]+)\]", text)


def closed_port() -> int:
    return free_port()  # nothing listens there once the probe socket is closed


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
    said = out.stdout.strip()
    head = "ERR popoto-memory needs the optional dependency 'popoto': "
    tail = " install 'doc-processing-std-tools[popoto]'"
    assert said.startswith(head) and said.endswith(tail), said
    pip = said[len(head) : -len(tail)]  # this environment's pip, as the README installs it
    assert pip == "pip" or REPO.joinpath(pip).resolve() == Path(sys.executable).parent / "pip"


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


@needs_redis_server
async def test_a_search_without_hits_logs_no_warning(
    client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    """popoto's own no-hit warning (advice on its internals) stays out of the client's server log."""
    err, _ = await call(client, "memory_save", {"content": "Deploys are blue-green via Argo."})
    assert not err
    with caplog.at_level(logging.INFO):
        err, text = await call(client, "memory_search", {"query": "zebra quantum"})
    assert not err, text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    with caplog.at_level(logging.DEBUG, logger="POPOTO.ContextAssembler"):
        await call(client, "memory_search", {"query": "zebra quantum"})
    assert "collected no query signal" in caplog.text  # still there when asked for


@needs_redis_server
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


@needs_redis_server
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


@needs_redis_server
async def test_an_error_repeats_at_most_a_kilobyte_of_an_argument(client):
    """Found by end_to_end/test_bad_arguments_fuzz.py: popoto's "No memory found for key '...'" repeated a 2 MB key whole."""
    key = "a/" * (1 << 20)
    err, text = await call(client, "memory_feedback", {"key": key})
    assert err
    assert text.startswith("No memory found for key 'a/a/a/")
    assert f"({len(key):,} characters)" in text
    assert len(text) < 1200


@needs_redis_server
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


@needs_redis_server
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


@needs_redis_server
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


@needs_redis_server
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


@needs_redis_server
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
