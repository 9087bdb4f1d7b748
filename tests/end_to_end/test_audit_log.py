"""The audit log and rate limits of a real ``dpt-launch`` (issue 36 §3, §4), spoken to by the
official mcp client: one line per call, who made it, no secret in any line; a call over a limit
refused in one line and counted in ``/metrics``. The slow lane kills the launcher (SIGKILL) in the
middle of 10,000 calls: every answered call has exactly one line, no line is torn, and no line
stands for a call that was never made."""

from __future__ import annotations

import getpass
import hashlib
import itertools
import json
import os
import random
import re
import select
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
import rfc8785
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from helpers.launch import http_launcher, launched, launcher_command, text_of
from helpers.paths import SERVERS, python_path
from helpers.rpc import request
from helpers.stdio_wire import INITIALIZE, INITIALIZED

SECRET = "planted-env-secret-7f3a9c"  # in the launcher's environment, and in call arguments
TOKEN = "planted-bearer-token-51be04d2"  # the HTTP launcher's static token
ECHO = "helpers.servers.sample_servers:echo_server"


def audit_lines(folder: Path) -> list[dict[str, Any]]:
    """Every line of the audit log and its rotated files, oldest first; each whole JSON."""
    files = sorted(
        folder.glob("audit.jsonl*"),
        key=lambda f: -int(f.suffix[1:]) if f.suffix[1:].isdigit() else 0,
    )
    found = []
    for file in files:
        text = file.read_text()
        assert not text or text.endswith("\n"), f"{file.name} ends in a torn line"
        found += [json.loads(line) for line in text.splitlines()]
    return found


def digest(arguments: dict[str, Any]) -> str:
    return hashlib.sha256(rfc8785.dumps(arguments)).hexdigest()


async def test_stdio_calls_have_one_line_each_and_no_secret(tmp_path: Path) -> None:
    config = tmp_path / "tools.yaml"
    config.write_text(
        f"audit: {{path: audit.jsonl, arguments: true}}\nservers:\n  echo: {{module: '{ECHO}'}}\n"
    )
    env = {"PYTHONPATH": python_path(), "DPT_TEST_PASSWORD": SECRET}
    with anyio.fail_after(60):
        async with launched(config, env=env) as session:
            said = await session.call_tool("echo", {"text": f"the secret is {SECRET}"})
            assert text_of(said) == f"the secret is {SECRET}"  # (the answer is the client's)
            await session.call_tool("echo", {"text": "two"})
            wrong = await session.call_tool("echo", {"txet": "three"})
            assert wrong.is_error
            lines = audit_lines(tmp_path)  # (each written before its answer came)
            assert len(lines) == 3
    # (fastmcp refuses the arguments with a pydantic error, not a ToolError: "error")
    assert [line["outcome"] for line in lines] == ["ok", "ok", "error"]
    first = lines[0]
    assert first["user"] == getpass.getuser() and first["client"] == "mcp"
    assert first["session"].startswith("stdio-") and {x["session"] for x in lines} == {
        first["session"]
    }
    assert (first["server"], first["tool"], first["pin"]) == ("echo", "echo", None)
    assert first["arguments"] == {"text": "the secret is [redacted]"}
    assert lines[1]["arguments_sha256"] == digest({"text": "two"})
    assert lines[1]["arguments_bytes"] == len(b'{"text":"two"}')
    assert SECRET not in (tmp_path / "audit.jsonl").read_text()


async def test_http_callers_are_named_limited_and_counted(tmp_path: Path) -> None:
    config = tmp_path / "tools.yaml"
    config.write_text(
        "transport:\n  type: http\n  auth: {token: ['${DPT_AUDIT_TOKEN}']}\n"
        "audit: {path: audit.jsonl, arguments: true}\n"
        "rate_limits:\n  - {tools: echo, users: 'token-*', rate: 2/h}\n"
        f"servers:\n  echo: {{module: '{ECHO}'}}\n"
        f"  ext: {{command: {sys.executable}, args: ['{SERVERS / 'policy_server.py'}'], "
        "namespace: ext}\n"
    )
    env = {**os.environ, "PYTHONPATH": python_path(), "DPT_AUDIT_TOKEN": TOKEN}
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    with http_launcher(config, env=env) as launcher, anyio.fail_after(60):
        async with (
            httpx2.AsyncClient(headers=bearer, timeout=30) as http,
            streamable_http_client(launcher.url, http_client=http) as (read, write, *_),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            answers = [await session.call_tool("echo", {"text": TOKEN}) for _ in range(3)]
            relayed = await session.call_tool("ext_ready", {})  # (a command: server's call)
            lines = audit_lines(tmp_path)
        metrics = request(launcher.port, "GET", "/metrics", headers=bearer).body.decode()
    assert [a.is_error for a in answers] == [False, False, True]
    refused = text_of(answers[2])
    assert re.fullmatch(
        r"rate limit: 'echo' was called too often by 'token-1'; retry in \d+ s "
        r"\(rate_limits\[0\]: 2/h, burst 2\)",
        refused,
    ), refused
    assert text_of(relayed) == "ready"
    assert [line["outcome"] for line in lines] == ["ok", "ok", "rate_limited", "ok"]
    assert lines[3]["tool"] == "ext_ready"
    assert {line["user"] for line in lines} == {"token-1"}
    assert {line["client"] for line in lines} == {"mcp"}
    assert len({line["session"] for line in lines}) == 1 and lines[0]["session"]
    assert lines[0]["arguments"] == {"text": "[redacted]"}
    assert TOKEN not in (tmp_path / "audit.jsonl").read_text()
    assert 'dpt_tool_calls_total{outcome="rate_limited",server="echo",tool="echo"} 1.0' in metrics


# -- SIGKILL in the middle of calls --------------------------------------------------------------

TOTAL = 10_000  # answered calls over every life of the launcher
WINDOW = 32  # calls in flight at once


class Life:
    """One launcher process over raw stdio pipes, calls pipelined; ids are call numbers."""

    def __init__(self, config: Path) -> None:
        self.errlog = (config.parent / "stderr.log").open("ab")
        self.proc = subprocess.Popen(
            [*launcher_command(), "--config", str(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.errlog,
            cwd=config.parent,
            env={**os.environ, "PYTHONPATH": python_path()},
        )
        self.pending = b""
        self.answered: set[int] = set()
        self.send(INITIALIZE)
        while 0 not in self.answered:
            assert self.read(60), "the launcher did not answer initialize"
        self.answered.discard(0)
        self.send(INITIALIZED)

    def send(self, line: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line if line.endswith(b"\n") else line + b"\n")
        self.proc.stdin.flush()

    def read(self, timeout: float) -> bool:
        """Take the replies stdout has; False at EOF or when none came within *timeout*."""
        assert self.proc.stdout is not None
        if not select.select([self.proc.stdout], [], [], timeout)[0]:
            return False
        chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
        if not chunk:
            return False
        *lines, self.pending = (self.pending + chunk).split(b"\n")
        for line in lines:
            reply = json.loads(line)
            if isinstance(reply.get("id"), int):
                assert "result" in reply, reply
                self.answered.add(reply["id"])
        return True


def call_arguments(n: int) -> tuple[str, dict[str, Any]]:
    """Call *n*: in-process (the SDK path) or a command: server (the stdio fast path, inline)."""
    return ("echo", {"text": f"call-{n}"}) if n % 2 else ("ext_ready", {"n": n})


@pytest.mark.slow
def test_sigkill_loses_no_line_of_an_answered_call(tmp_path: Path) -> None:
    config = tmp_path / "tools.yaml"
    config.write_text(
        "audit: {path: audit.jsonl, max_bytes: 65536, backups: 1000}\n"
        "servers:\n"
        f"  echo: {{module: '{ECHO}'}}\n"
        f"  ext: {{command: {sys.executable}, args: ['{SERVERS / 'policy_server.py'}'], "
        "namespace: ext}\n"
    )
    rng = random.Random(36)
    numbers = itertools.count(1)
    sent: set[int] = set()
    answered: set[int] = set()
    kills = 0
    while len(answered) < TOTAL:
        life = Life(config)
        left = TOTAL - len(answered)
        kill_at = rng.randint(300, 2500) if left > 2500 else None  # (the last life ends calmly)
        in_flight: set[int] = set()
        done = 0
        while kill_at is None or done < kill_at:
            while len(in_flight) < WINDOW and (kill_at is not None or done + len(in_flight) < left):
                n = next(numbers)
                tool, arguments = call_arguments(n)
                message = {"name": tool, "arguments": arguments}
                life.send(
                    json.dumps(
                        {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": message}
                    ).encode()
                )
                sent.add(n)
                in_flight.add(n)
            if not in_flight:
                break
            assert life.read(60), "no reply within 60 s"
            finished = in_flight & life.answered
            in_flight -= finished
            done += len(finished)
        if kill_at is not None:
            life.proc.kill()  # SIGKILL, calls in flight
            kills += 1
            while life.read(10):  # replies it wrote before it died were answered too
                pass
        else:
            assert life.proc.stdin is not None
            life.proc.stdin.close()
            while life.read(30):
                pass
        life.proc.wait(30)
        life.errlog.close()
        answered |= life.answered
    assert kills >= 3
    by_digest = {digest(call_arguments(n)[1]): n for n in sent}
    lines = audit_lines(tmp_path)
    calls = [by_digest.get(line["arguments_sha256"]) for line in lines]
    assert None not in calls, "a line stands for a call that was never made"
    counts: dict[int, int] = {}
    for n in calls:
        assert n is not None
        counts[n] = counts.get(n, 0) + 1
    assert all(count == 1 for count in counts.values()), "a call has two lines"
    missing = answered - counts.keys()
    assert not missing, f"{len(missing)} answered calls have no line, e.g. {sorted(missing)[:5]}"
