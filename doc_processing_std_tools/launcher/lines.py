"""Splitting a byte stream into JSON-RPC lines, linear in their length (stdin, a child's stdout)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

SHORT_READ = 1 << 16  # under glibc's mmap threshold: no mmap, mremap and munmap per read
LONG_READ = 1 << 20  # while a long line arrives
HEAD = 1024  # bytes of an overlong line kept, to say what it was


class LineBuffer:
    """Splits a byte stream into lines (without their ``\\n``).

    Each chunk is searched once and a line is joined once, so a line of any length
    costs time linear in its length. With *max_line*, a line longer than that is never
    held whole: past the limit its bytes are dropped as they arrive, and when it ends
    *on_overlong* gets its first :data:`HEAD` bytes and its length.
    """

    def __init__(
        self,
        max_line: int | None = None,
        on_overlong: Callable[[bytes, int], None] | None = None,
    ) -> None:
        self.unfinished: list[bytes] = []  # the pieces of the line not yet ended
        self._read_size = SHORT_READ
        self._max = max_line
        self._on_overlong = on_overlong
        self._held = 0  # bytes in unfinished (counted only with max_line)
        self.dropping = False  # in the middle of an overlong line (unfinished is then empty)
        self._head = b""
        self._dropped = 0

    def read(self, fd: int) -> list[bytes] | None:
        """One read(2) of *fd*: the lines it completes, or None at the end of the stream.

        Reads are short while messages are, long while a long line arrives: a short message
        read into a 1 MiB buffer cost an mmap, an mremap, a munmap and two page faults
        (~15 us) per message; a pipe hands over at most 64 KiB per read anyway.
        """
        chunk = os.read(fd, self._read_size)
        if not chunk:
            return None
        self._read_size = LONG_READ if len(chunk) >= SHORT_READ else SHORT_READ
        if not self.unfinished and chunk.find(b"\n") == len(chunk) - 1:
            return [chunk[:-1]]  # (one whole line, the usual case: no call to feed)
        return self.feed(chunk)

    def feed(self, chunk: bytes) -> list[bytes]:
        """The lines *chunk* completes; its unfinished tail is kept for the next one."""
        if self._max is not None:
            return self._feed_capped(chunk, self._max)
        lines = []
        parts, start = self.unfinished, 0
        while (end := chunk.find(b"\n", start)) >= 0:
            parts.append(chunk[start:end])
            lines.append(b"".join(parts))
            parts.clear()
            start = end + 1
        if start < len(chunk):
            parts.append(chunk[start:] if start else chunk)
        return lines

    def _feed_capped(self, chunk: bytes, limit: int) -> list[bytes]:
        lines: list[bytes] = []
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            stop = end if end >= 0 else len(chunk)
            size = stop - start
            if self.dropping:
                self._dropped += size
            elif self._held + size > limit:
                self._head = _head_of(self.unfinished, chunk[start : start + HEAD])
                self._dropped, self.dropping = self._held + size, True
                self.unfinished.clear()
                self._held = 0
            elif size:
                self.unfinished.append(chunk[start:stop])
                self._held += size
            if end < 0:
                return lines
            if self.dropping:
                self._overlong()
            else:
                lines.append(b"".join(self.unfinished))
                self.unfinished.clear()
                self._held = 0
            start = end + 1

    def _overlong(self) -> None:
        head, size = self._head, self._dropped
        self.dropping, self._head, self._dropped = False, b"", 0
        if self._on_overlong is not None:
            self._on_overlong(head, size)

    def rest(self) -> bytes | None:
        """The unfinished last line at the end of the stream, if any."""
        if self.dropping:
            self._overlong()
            return None
        return b"".join(self.unfinished) if self.unfinished else None


def _head_of(parts: list[bytes], tail: bytes) -> bytes:
    """The first :data:`HEAD` bytes of *parts* then *tail*, copying no more than that (a join
    of an overlong line's pieces, to be dropped, would copy up to ``max_line`` bytes)."""
    head = bytearray()
    for part in (*parts, tail):
        head += part[: HEAD - len(head)]
        if len(head) >= HEAD:
            break
    return bytes(head)


def read_lines(fd: int, first: bytes = b"") -> Iterator[bytes]:
    """The lines of *first* then of *fd* (without their ``\\n``), until EOF; linear in their
    length."""
    buffer = LineBuffer()
    yield from buffer.feed(first)
    while (lines := buffer.read(fd)) is not None:
        yield from lines
    if (rest := buffer.rest()) is not None:
        yield rest
