"""A process spoken to in raw JSON-RPC lines over its stdin and stdout (no SDK in between), for
tests that must send bytes no client would, and read exactly what comes back."""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
from pathlib import Path

REPLY_TIMEOUT = 20.0
INITIALIZE = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"},
        },
    }
).encode()
INITIALIZED = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'


class RawStdio:
    """*command* started with pipes; lines written and read as bytes."""

    def __init__(self, command: list[str], cwd: Path, *, stderr: int = subprocess.PIPE) -> None:
        self.proc = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, cwd=cwd
        )
        self.pending = b""

    def send(self, raw: bytes) -> None:
        assert self.proc.stdin
        self.proc.stdin.write(raw + b"\n")
        self.proc.stdin.flush()

    def line(self, timeout: float = REPLY_TIMEOUT) -> bytes | None:
        """The next line written, or None when none comes within *timeout* (or stdout ends)."""
        assert self.proc.stdout
        deadline = time.monotonic() + timeout
        while b"\n" not in self.pending:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if not ready:
                return None
            chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
            if not chunk:
                return None
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return line

    def receive(self, timeout: float = REPLY_TIMEOUT) -> dict:
        line = self.line(timeout)
        assert line is not None, f"no reply within {timeout} s"
        return json.loads(line)

    def request(self, raw: bytes) -> dict:
        self.send(raw)
        return self.receive()

    def answer_to(self, request_id: object, timeout: float = REPLY_TIMEOUT) -> dict | None:
        """The reply to *request_id* (other messages skipped), or None when none comes."""
        while (line := self.line(timeout)) is not None:
            message = json.loads(line)
            if message.get("id") == request_id and "method" not in message:
                return message
        return None

    def initialize(self) -> None:
        reply = self.request(INITIALIZE)
        assert reply["id"] == 0 and "result" in reply
        self.send(INITIALIZED)

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream:
                stream.close()
