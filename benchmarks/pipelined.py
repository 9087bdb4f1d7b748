"""A raw JSON-RPC client over one stdio connection that keeps N requests in flight.

The official ``mcp`` client spends about as much CPU per call as the launcher does (a task per
request, pydantic models both ways), so N callers through it measure the client as much as the
server, and on two cores it competes with the server for them. This one writes request lines
and reads answer lines on the raw pipes in one thread: each answer read sends the next request,
so N are outstanding at every moment, and its cost per call is a ``json.loads`` of the answer.
The server is started and initialized the way a client does; nothing else is sent.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

PROTOCOL = "2025-11-25"
CHUNK = 1 << 16


class PipelineError(Exception):
    """The server closed its output, answered with an error, or answered something unasked."""


class Pipelined:
    """One stdio server process and its connection: :meth:`rate` measures it."""

    def __init__(self, command: list[str], env: Mapping[str, str], cwd: Path | None = None):
        self.proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=dict(env),
            cwd=cwd,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._in, self._out = self.proc.stdin.fileno(), self.proc.stdout.fileno()
        self._buffer = b""
        self._next_id = 0
        init = {
            "protocolVersion": PROTOCOL,
            "capabilities": {},
            "clientInfo": {"name": "pipelined-bench", "version": "0"},
        }
        self.request("initialize", init)
        self._write([{"jsonrpc": "2.0", "method": "notifications/initialized"}])
        self.request("tools/list", {})

    def __enter__(self) -> Pipelined:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def _write(self, messages: list[dict[str, Any]]) -> None:
        data = b"".join(json.dumps(m, separators=(",", ":")).encode() + b"\n" for m in messages)
        view = memoryview(data)
        while view:
            view = view[os.write(self._in, view) :]

    def _lines(self) -> list[bytes]:
        """The complete lines read so far, waiting for at least one."""
        while b"\n" not in self._buffer:
            chunk = os.read(self._out, CHUNK)
            if not chunk:
                raise PipelineError("the server closed its output")
            self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        return lines

    def _message(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self._next_id += 1
        return {"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params}

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """One request, waited for: its result."""
        sent = self._message(method, params)
        self._write([sent])
        while True:
            for line in self._lines():
                answer = json.loads(line)
                if "method" not in answer and answer.get("id") == sent["id"]:
                    if "error" in answer:
                        raise PipelineError(f"{method}: {answer['error']}")
                    return answer["result"]

    def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        result = self.request("tools/call", {"name": tool, "arguments": arguments})
        if result.get("isError"):
            raise PipelineError(f"{tool}: {json.dumps(result)[:300]}")
        return result

    def rate(
        self, tool: str, arguments: Callable[[int], dict[str, Any]], calls: int, n: int
    ) -> float:
        """Calls/s of *calls* calls of *tool* (the i-th with ``arguments(i)``), *n* in flight
        from the first request to the last answer."""
        sent = 0
        pending: set[int] = set()

        def send(count: int) -> None:
            nonlocal sent
            batch = []
            for _ in range(count):
                message = self._message("tools/call", {"name": tool, "arguments": arguments(sent)})
                pending.add(message["id"])
                batch.append(message)
                sent += 1
            if batch:
                self._write(batch)

        start = time.perf_counter()
        send(min(n, calls))
        done = 0
        while done < calls:
            answered = 0
            for line in self._lines():
                answer = json.loads(line)
                if "method" in answer or answer.get("id") not in pending:
                    continue  # a notification, or a request of the server's
                pending.discard(answer["id"])
                if "error" in answer or answer["result"].get("isError"):
                    raise PipelineError(f"{tool}: {line[:300].decode(errors='replace')}")
                answered += 1
            done += answered
            send(min(answered, calls - sent))
        return calls / (time.perf_counter() - start)
