"""The audit log's parts: lines whole and appended, rotation, secrets, subscriptions, and the
policy writing one line per call before it returns (its caller then sends the answer)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastmcp.exceptions import ToolError

from doc_processing_std_tools.launcher.calls.audit import (
    REDACTED,
    AuditLog,
    Caller,
    FileSink,
    canonical_arguments,
    secrets_of,
    stdout_taken,
    trace_id_of,
)
from doc_processing_std_tools.launcher.calls.failures import CallFailed
from doc_processing_std_tools.launcher.calls.guards import CallGuards
from doc_processing_std_tools.launcher.calls.policy import CallPolicy, LockMode, ToolRules
from doc_processing_std_tools.launcher.config.schema import LauncherConfig, LoadedConfig

SECRET = "s3cr3t-planted-in-env-0123"
TOKEN = "bearer-token-never-logged-456"


def loaded(tmp_path: Path, **config: Any) -> LoadedConfig:
    data = {"servers": {"memory": {"server": "memory-tools"}}, **config}
    return LoadedConfig(LauncherConfig.model_validate(data), tmp_path / "tools.yaml")


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


class ListSink:
    def __init__(self) -> None:
        self.data: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.data.append(data)

    def close(self) -> None:
        pass


def test_canonical_arguments_are_rfc8785() -> None:
    assert canonical_arguments({"b": 1, "a": [1.0, "é"]}) == '{"a":[1,"é"],"b":1}'.encode()
    assert canonical_arguments(None) == b"{}"
    assert canonical_arguments({"x": float("nan")})  # (not encodable: still hashed)


def test_trace_id_from_meta_or_headers() -> None:
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert trace_id_of({"traceparent": parent}, None) == "0af7651916cd43dd8448eb211c80319c"
    assert trace_id_of(None, {"traceparent": parent}) == "0af7651916cd43dd8448eb211c80319c"
    assert trace_id_of({"traceparent": "junk"}, None) is None


def test_file_lines_are_appended_whole_and_rotated(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_text('{"old": 1}\n{"torn":')  # (a power loss cut its last line)
    sink = FileSink(path, max_bytes=200, backups=2)
    audit = AuditLog(sink)
    for n in range(12):
        audit.write({"n": n, "pad": "x" * 40})
    audit.close()
    assert oct(path.stat().st_mode & 0o777) in ("0o600", "0o644")  # (created before: kept)
    files = [path, path.with_name("audit.jsonl.1"), path.with_name("audit.jsonl.2")]
    assert all(f.exists() for f in files) and not path.with_name("audit.jsonl.3").exists()
    kept = [line for f in reversed(files) for line in f.read_text().splitlines()]
    numbers = [json.loads(line)["n"] for line in kept if line.startswith('{"n"')]
    assert numbers == list(range(12 - len(numbers), 12))  # the newest, in order
    assert all(f.stat().st_size <= 200 for f in files)


def test_a_new_file_is_private(tmp_path: Path) -> None:
    path = tmp_path / "new.jsonl"
    FileSink(path).close()
    assert path.stat().st_mode & 0o777 == 0o600


def test_no_backups_drops_old_lines(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    audit = AuditLog(FileSink(path, max_bytes=50, backups=0))
    for n in range(5):
        audit.write({"n": n, "pad": "y" * 20})
    assert lines(path) == [{"n": 4, "pad": "y" * 20}]
    assert not path.with_name("audit.jsonl.1").exists()


def test_secrets_never_reach_a_line(tmp_path: Path) -> None:
    config = loaded(tmp_path, transport={"type": "http", "auth": {"token": [TOKEN]}})
    found = secrets_of(config, {"MY_API_KEY": SECRET, "HOME": "/home/someone", "X_TOKEN": "ab"})
    assert set(found) == {SECRET, TOKEN}  # (HOME is no secret; "ab" is too short to be one)
    sink = ListSink()
    audit = AuditLog(sink, arguments=True, secrets=found)
    audit.write({"arguments": {"text": f"a {SECRET} b", "t": TOKEN}, "client": TOKEN})
    text = b"".join(sink.data).decode()
    assert SECRET not in text and TOKEN not in text and text.count(REDACTED) == 3


def test_stdout_is_refused_over_stdio(tmp_path: Path) -> None:
    config = loaded(tmp_path, audit="stdout")
    assert "stdout carries the MCP protocol" in (stdout_taken(config, "stdio") or "")
    assert stdout_taken(config, "http") is None
    assert stdout_taken(loaded(tmp_path, audit={"path": "a.jsonl"}), "stdio") is None


async def test_subscribers_read_new_lines_and_fall_behind_safely() -> None:
    audit = AuditLog(None)
    early = audit.subscribe()
    audit.write({"n": 0})
    late = audit.subscribe(backlog=2)
    for n in range(1, 4):
        audit.write({"n": n})
    with anyio.fail_after(5):
        assert [json.loads(await early.__anext__())["n"] for _ in range(4)] == [0, 1, 2, 3]
        assert [json.loads(line)["n"] async for line in _closed_after(late, 2)] == [2, 3]
    assert late.dropped == 1


async def _closed_after(subscription: Any, count: int) -> Any:
    for _ in range(count):
        yield await subscription.__anext__()
    subscription.close()


async def test_a_subscriber_gets_lines_written_from_another_thread() -> None:
    audit = AuditLog(None)
    with audit.subscribe() as reader:
        await anyio.to_thread.run_sync(audit.write, {"from": "thread"})
        with anyio.fail_after(5):
            assert json.loads(await reader.__anext__()) == {"from": "thread"}


# -- the policy writes the line -------------------------------------------------------------


def policy_with(sink: ListSink, *, arguments: bool = False) -> CallPolicy:
    guards = CallGuards(
        AuditLog(sink, arguments=arguments),
        identify=lambda session, headers: Caller("alice", "s-1", "tester"),
    )
    rules = ToolRules(server="srv", tool="srv_tool", lock=LockMode.NONE, timeout=5, pin="pinned")
    return CallPolicy(rules, None, guards)


async def test_one_line_per_call_written_before_it_returns() -> None:
    sink = ListSink()
    policy = policy_with(sink, arguments=True)
    seen_before: list[int] = []

    async def tool() -> dict[str, Any]:
        seen_before.append(len(sink.data))
        return {"content": [], "isError": False}

    arguments = {"b": 2, "a": "x"}
    await policy.run(
        tool, arguments=arguments, meta={"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}
    )
    assert seen_before == [0] and len(sink.data) == 1
    line = json.loads(sink.data[0])
    digest = hashlib.sha256(b'{"a":"x","b":2}').hexdigest()
    assert line | {"time": None, "duration_ms": None} == {
        "time": None,
        "user": "alice",
        "session": "s-1",
        "client": "tester",
        "server": "srv",
        "tool": "srv_tool",
        "arguments_bytes": 15,
        "arguments_sha256": digest,
        "outcome": "ok",
        "duration_ms": None,
        "trace_id": "1" * 32,
        "pin": "pinned",
        "arguments": arguments,
    }
    assert line["time"].endswith("Z") and line["duration_ms"] >= 0


async def test_failed_and_cancelled_calls_have_their_line() -> None:
    sink = ListSink()
    policy = policy_with(sink)

    async def fails() -> None:
        raise ToolError("no")

    with pytest.raises(ToolError):
        await policy.run(fails)

    async def hangs() -> None:
        await anyio.sleep_forever()

    with anyio.move_on_after(0.01):
        await policy.run(hangs)
    outcomes = [json.loads(data)["outcome"] for data in sink.data]
    assert outcomes == ["tool_error", "cancelled"]
    assert "arguments" not in json.loads(sink.data[0])  # (arguments: false)


async def test_a_failing_sink_does_not_fail_the_call(tmp_path: Path) -> None:
    sink = FileSink(tmp_path / "audit.jsonl")
    os.close(sink._fd)
    sink._fd = os.open(os.devnull, os.O_RDONLY)  # (writes now fail: EBADF)
    audit = AuditLog(sink)
    guards = CallGuards(audit)
    rules = ToolRules(server="srv", tool="t", lock=LockMode.NONE, timeout=5)

    async def tool() -> str:
        return "done"

    assert await CallPolicy(rules, None, guards).run(tool) == "done"
    assert audit.failures == 1
    with pytest.raises(CallFailed):
        await CallPolicy(
            ToolRules(
                server="srv", tool="t", lock=LockMode.NONE, timeout=5, unavailable=lambda: "down"
            ),
            None,
            guards,
        ).run(tool)
    assert audit.failures == 2
