"""Splitting a byte stream into JSON-RPC lines, linear in their length (stdin, a child's stdout)."""

from __future__ import annotations

import os
from collections.abc import Iterator

SHORT_READ = 1 << 16  # under glibc's mmap threshold: no mmap, mremap and munmap per read
LONG_READ = 1 << 20  # while a long line arrives


class LineBuffer:
    """Splits a byte stream into lines (without their ``\\n``).

    Each chunk is searched once and a line is joined once, so a line of any length
    costs time linear in its length.
    """

    def __init__(self) -> None:
        self.unfinished: list[bytes] = []  # the pieces of the line not yet ended
        self._read_size = SHORT_READ

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

    def rest(self) -> bytes | None:
        """The unfinished last line at the end of the stream, if any."""
        return b"".join(self.unfinished) if self.unfinished else None


def read_lines(fd: int) -> Iterator[bytes]:
    """The lines of *fd* (without their ``\\n``), until EOF; linear in their length."""
    buffer = LineBuffer()
    while (lines := buffer.read(fd)) is not None:
        yield from lines
    if (rest := buffer.rest()) is not None:
        yield rest
