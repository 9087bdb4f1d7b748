"""The audit log: one JSON line per tool call, written before the call's answer is sent.

``audit: {path: FILE}`` (or ``path: stdout``) in the config. Each line says who called what
and how it ended: time, user, session, client, server, tool, the arguments' size and SHA-256
(of their canonical JSON, RFC 8785), outcome, duration, trace id and pin status; the
arguments themselves only with ``arguments: true``. The call policy (:mod:`.policy`) writes
the line at the end of every call, on every path, before the answer goes out, so a launcher
killed at any moment has a line for every call it answered.

A line is one ``os.write`` on an ``O_APPEND`` descriptor: the kernel appends it whole, so a
killed launcher never leaves half a line, and never touches the lines before it. Rotation by
size renames files (``FILE`` to ``FILE.1`` ...), each step atomic. A line is in the page cache
once written: it survives the process, not a power loss, unless ``fsync: true``.

In-process readers (the browser console) take new lines from :meth:`AuditLog.subscribe`: an
async iterator of lines, each reader with a bounded backlog of its own. A reader that falls
behind loses its oldest lines (:attr:`AuditSubscription.dropped` counts them); it never slows
a call.

Secrets: no header or token is ever part of a line. The launcher's own bearer tokens and the
values of environment variables whose names say they hold a secret are replaced by
``[redacted]`` wherever they would appear (in arguments logged with ``arguments: true``, in a
client's name).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import re
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import rfc8785

from ..config.audit import AUDIT_STDOUT, AuditConfig
from ..config.schema import LoadedConfig

log = logging.getLogger("dpt-launch")

REDACTED = "[redacted]"
DEFAULT_BACKLOG = 1000  # lines a subscriber may fall behind before its oldest are dropped
# names of environment variables whose values are secrets (never in a line)
SECRET_NAME = re.compile(
    r"TOKEN|SECRET|PASSW|PASSPHRASE|API_?KEY|PRIVATE|CREDENTIAL|AUTH|COOKIE", re.I
)
MIN_SECRET_CHARS = 8  # shorter values are words, not secrets: redacting them would garble lines
ERROR_EVERY = 60.0  # seconds between two log lines about a failing audit file


@dataclass(frozen=True, slots=True)
class Caller:
    """Who made a call: the user (a JWT's ``sub``, a static token's name, the local user over
    stdio), the MCP session, and the client's name from its ``initialize``. *claims*: the
    verified token's claims (empty for a static token); None without a verified credential
    (stdio, anonymous HTTP): then only ``access:`` rules that name no one apply."""

    user: str | None
    session: str | None = None
    client: str | None = None
    claims: Mapping[str, Any] | None = None


def canonical_arguments(arguments: Any) -> bytes:
    """The canonical JSON of a call's arguments (RFC 8785); a value it cannot encode (a NaN)
    falls back to sorted, compact JSON."""
    if arguments is None:
        arguments = {}
    try:
        return rfc8785.dumps(arguments)
    except (rfc8785.CanonicalizationError, TypeError, ValueError):
        return json.dumps(
            arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=repr
        ).encode("utf-8", "surrogatepass")


def trace_id_of(meta: Mapping[str, Any] | None, headers: Mapping[str, str] | None) -> str | None:
    """The trace id of a W3C ``traceparent`` the call carries (its ``_meta``, else its HTTP
    request's headers), or None."""
    for source in (meta, headers):
        if not source:
            continue
        parent = source.get("traceparent")
        if isinstance(parent, str):
            parts = parent.split("-")
            if len(parts) >= 4 and len(parts[1]) == 32:
                return parts[1].lower()
    return None


class Sink(Protocol):
    """Where lines go; :meth:`write` returns once the line is written whole."""

    def write(self, data: bytes) -> None: ...

    def close(self) -> None: ...


def _write_all(fd: int, data: bytes) -> None:
    """*data* written to *fd*: one ``os.write`` but for a short write (a full disk)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


class StdoutSink:
    """Lines to standard output (a container's log): never when stdout carries MCP (stdio)."""

    def __init__(self, fd: int = 1) -> None:
        self._fd = fd
        self._lock = threading.Lock()

    def write(self, data: bytes) -> None:
        with self._lock:
            _write_all(self._fd, data)

    def close(self) -> None:
        pass


class FileSink:
    """Lines appended to *path* (mode 0600), rotated once it would pass *max_bytes*: ``path``
    becomes ``path.1``, ``path.1`` becomes ``path.2`` ... up to *backups* (0: the old lines
    are dropped). One writer per file: launchers must not share one."""

    def __init__(self, path: Path, max_bytes: int = 0, backups: int = 0, fsync: bool = False):
        self.path, self.max_bytes, self.backups, self.fsync = path, max_bytes, backups, fsync
        self._lock = threading.Lock()
        self._torn = False  # the last write stopped short: the next line starts on a new line
        self._fd, self._size = self._open()

    def _open(self) -> tuple[int, int]:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(self.path, flags, 0o600)
        size = os.fstat(fd).st_size
        if size:
            with open(self.path, "rb") as file:
                file.seek(size - 1)
                # (a power loss cut the last line: it stays, alone on its line)
                self._torn = file.read(1) != b"\n"
        return fd, size

    def write(self, data: bytes) -> None:
        with self._lock:
            if self._torn:
                data = b"\n" + data
            if self.max_bytes and self._size and self._size + len(data) > self.max_bytes:
                self._rotate()
            try:
                _write_all(self._fd, data)
            except OSError:
                self._torn = True
                self._size = os.fstat(self._fd).st_size
                raise
            self._torn = False
            self._size += len(data)
            if self.fsync:
                os.fsync(self._fd)

    def _rotate(self) -> None:
        os.close(self._fd)
        path = self.path
        if self.backups:
            for n in range(self.backups - 1, 0, -1):
                older = path.with_name(f"{path.name}.{n}")
                if older.exists():
                    os.replace(older, path.with_name(f"{path.name}.{n + 1}"))
            os.replace(path, path.with_name(f"{path.name}.1"))
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        self._fd, self._size = self._open()

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


class AuditSubscription:
    """New audit lines (JSON text, no newline) for one in-process reader, as an async iterator.

    Made on the event loop that reads it; lines published from another thread reach it through
    that loop. At most *backlog* lines wait: older ones are dropped and counted.
    """

    def __init__(self, log_: AuditLog, backlog: int) -> None:
        self._log = log_
        self._lines: deque[str] = deque(maxlen=backlog)
        self._ready = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self.dropped = 0
        self.closed = False

    def _put(self, line: str) -> None:
        if len(self._lines) == self._lines.maxlen:
            self.dropped += 1
        self._lines.append(line)
        self._ready.set()

    def publish(self, line: str) -> None:
        try:
            same_loop = asyncio.get_running_loop() is self._loop
        except RuntimeError:
            same_loop = False
        if same_loop:
            self._put(line)
        else:
            with contextlib.suppress(RuntimeError):  # its loop is closed: nobody reads
                self._loop.call_soon_threadsafe(self._put, line)

    def __aiter__(self) -> AsyncIterator[str]:
        return self

    async def __anext__(self) -> str:
        while not self._lines:
            if self.closed:
                raise StopAsyncIteration
            self._ready.clear()
            await self._ready.wait()
        return self._lines.popleft()

    def close(self) -> None:
        """Stop reading: the iterator ends once the lines already here are read."""
        self.closed = True
        self._log._subscribers.discard(self)
        self._ready.set()

    def __enter__(self) -> AuditSubscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AuditLog:
    """A launcher's audit log: lines to a :class:`Sink` (or none: subscribers only), and to
    the in-process subscribers."""

    def __init__(
        self, sink: Sink | None, *, arguments: bool = False, secrets: Iterable[str] = ()
    ) -> None:
        self.sink = sink
        self.arguments = arguments
        self._subscribers: set[AuditSubscription] = set()
        # each secret as it would appear in JSON text (escaped), longest first
        found = {json.dumps(s, ensure_ascii=False)[1:-1] for s in secrets if s}
        self._secrets = sorted((s for s in found if len(s) >= MIN_SECRET_CHARS), key=len)[::-1]
        self.failures = 0  # lines that could not be written to the sink
        self._last_error = 0.0

    @classmethod
    def from_config(
        cls, config: AuditConfig, loaded: LoadedConfig, environ: Mapping[str, str] | None = None
    ) -> AuditLog:
        """The log *config* asks for; its file opened (or created) now, so a path that cannot be
        written fails the start, not a call. Raises ``ConfigError`` for such a path."""
        sink: Sink
        if config.path == AUDIT_STDOUT:
            sink = StdoutSink()
        else:
            path = (loaded.base_dir / Path(config.path).expanduser()).resolve()
            try:
                sink = FileSink(path, config.max_bytes, config.backups, config.fsync)
            except OSError as exc:
                raise loaded.error(
                    ("audit", "path"), f"cannot open the audit log {path}: {exc.strerror or exc}"
                ) from None
        return cls(sink, arguments=config.arguments, secrets=secrets_of(loaded, environ))

    def subscribe(self, backlog: int = DEFAULT_BACKLOG) -> AuditSubscription:
        """A reader of the lines written from now on (call on the event loop that reads it)."""
        subscription = AuditSubscription(self, backlog)
        self._subscribers.add(subscription)
        return subscription

    def redacted(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text

    def write(self, entry: Mapping[str, Any]) -> None:
        """Write *entry* as one line, and pass it to the subscribers. A sink that fails is
        reported (once a minute) and counted; the call is answered all the same."""
        line = json.dumps(entry, ensure_ascii=False, separators=(",", ":"), default=repr)
        if self._secrets:
            line = self.redacted(line)
        if self.sink is not None:
            try:
                self.sink.write(line.encode("utf-8", "backslashreplace") + b"\n")
            except OSError as exc:
                self.failures += 1
                now = time.monotonic()
                if now - self._last_error > ERROR_EVERY:
                    self._last_error = now
                    log.error("audit: cannot write the audit log: %s", exc.strerror or exc)
        for subscriber in list(self._subscribers):
            subscriber.publish(line)

    def close(self) -> None:
        for subscriber in list(self._subscribers):
            subscriber.close()
        if self.sink is not None:
            self.sink.close()


def secrets_of(loaded: LoadedConfig, environ: Mapping[str, str] | None = None) -> list[str]:
    """What no line may show: the launcher's bearer tokens, and the values of environment
    variables named like secrets (``*TOKEN*``, ``*SECRET*``, ``*PASSWORD*``, ``*API_KEY*`` ...)."""
    env = os.environ if environ is None else environ
    found = list(loaded.config.transport.tokens)
    found += [value for name, value in env.items() if SECRET_NAME.search(name)]
    return [s for s in found if len(s) >= MIN_SECRET_CHARS]


def stdout_taken(loaded: LoadedConfig, transport_type: str) -> str | None:
    """The config error when the audit log would write to stdout while stdio serves MCP there."""
    audit = loaded.config.audit
    if audit is None or audit.path != AUDIT_STDOUT or transport_type != "stdio":
        return None
    return str(
        loaded.error(
            ("audit", "path"),
            "stdout carries the MCP protocol over the stdio transport: write the audit log to "
            "a file (audit.path: audit.jsonl), or serve over http",
        )
    )


class CallNote:
    """What the audit line of one call needs from its start: who, when, its arguments."""

    __slots__ = ("arguments", "caller", "digest", "size", "started", "trace_id", "wall")

    def __init__(
        self, caller: Caller, arguments: Any, keep_arguments: bool, trace_id: str | None
    ) -> None:
        self.caller = caller
        self.wall = time.time()
        self.started = time.perf_counter()
        data = canonical_arguments(arguments)
        self.size = len(data)
        self.digest = hashlib.sha256(data).hexdigest()
        self.arguments = (arguments if arguments is not None else {}) if keep_arguments else None
        self.trace_id = trace_id


def audit_entry(
    note: CallNote,
    server: str,
    tool: str,
    outcome: str,
    trace_id: str | None,
    pin: str | None,
) -> dict[str, Any]:
    """The line of a call that ended as *outcome*."""
    caller = note.caller
    entry: dict[str, Any] = {
        "time": datetime.fromtimestamp(note.wall, UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z"),
        "user": caller.user,
        "session": caller.session,
        "client": caller.client,
        "server": server,
        "tool": tool,
        "arguments_bytes": note.size,
        "arguments_sha256": note.digest,
        "outcome": outcome,
        "duration_ms": round((time.perf_counter() - note.started) * 1000, 3),
        "trace_id": trace_id or note.trace_id,
        "pin": pin,
    }
    if note.arguments is not None:
        entry["arguments"] = note.arguments
    return entry
