"""The filesystem tools that read: text, media, several files, listings and file info."""

from __future__ import annotations

import base64
import errno
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..containment import FileTooLarge
from ..shared.client_text import quote

if TYPE_CHECKING:
    pass
from .base import _CHUNK, _MEDIA_TYPES, FileSystemError, RootedFileSystem, _timestamp, format_size


class ReadTools(RootedFileSystem):
    """The tools that read files and folders (never under a lock)."""

    def read_text_file(self, path: str, head: int | None = None, tail: int | None = None) -> str:
        if head is not None and tail is not None:
            raise FileSystemError("Cannot specify both head and tail parameters simultaneously")
        for name, value in (("head", head), ("tail", tail)):
            if value is not None and value < 0:
                raise FileSystemError(f"{name} must be 0 or more, got {value}")

        def read() -> str:
            if head is None and tail is None:
                data = self.jail.read_bytes(path, limit=self.settings.max_read_bytes)
                return data.decode("utf-8", errors="replace")
            with self.jail.open_file(path) as (handle, _real):
                if head is not None:
                    return self._head(handle, head)
                return self._tail(handle, tail or 0)

        return self._guard(path, read)

    def _truncated_note(self) -> str:
        return (
            f"\n[output truncated at max_read_bytes={self.settings.max_read_bytes}; "
            "ask for fewer lines]"
        )

    def _head(self, handle: Any, lines: int) -> str:
        if lines == 0:
            return ""
        limit = self.settings.max_read_bytes
        data = bytearray()
        newlines = 0
        while newlines < lines and len(data) <= limit:
            chunk = handle.read(_CHUNK)
            if not chunk:
                break
            data += chunk
            newlines += chunk.count(b"\n")
        cut = -1
        for _ in range(min(lines, newlines)):
            cut = data.index(b"\n", cut + 1)
        body = bytes(data[:cut] if newlines >= lines else data)
        if newlines >= lines:
            body = body.removesuffix(b"\r")
        truncated = len(body) > limit
        text = body[:limit].decode("utf-8", errors="replace").replace("\r\n", "\n")
        if newlines < lines:
            text = text.removesuffix("\n")
        return text + (self._truncated_note() if truncated else "")

    def _tail(self, handle: Any, lines: int) -> str:
        if lines == 0:
            return ""
        limit = self.settings.max_read_bytes
        position = handle.seek(0, os.SEEK_END)
        chunks: list[bytes] = []
        total = newlines = 0
        final_newline = False
        # A newline before the wanted lines marks where they begin; the newline
        # at the very end of the file does not start a line.
        while position > 0 and total <= limit:
            size = min(_CHUNK, position)
            position -= size
            handle.seek(position)
            chunk = handle.read(size)
            if not chunks:
                final_newline = chunk.endswith(b"\n")
            chunks.append(chunk)
            total += len(chunk)
            newlines += chunk.count(b"\n")
            if newlines - final_newline >= lines:
                break
        data = b"".join(reversed(chunks)).replace(b"\r\n", b"\n")
        body = data[:-1] if data.endswith(b"\n") else data
        parts = body.split(b"\n")
        wanted = b"\n".join(parts[-lines:])
        truncated = len(wanted) > limit or (position > 0 and len(parts) <= lines)
        text = wanted[-limit:].decode("utf-8", errors="replace")
        return text + (self._truncated_note() if truncated else "")

    def read_media_file(self, path: str) -> tuple[str, str, str, Path]:
        """(kind, MIME type, base64 data, real path); kind is image, audio or blob."""

        def read() -> tuple[str, str, str, Path]:
            with self.jail.open_file(path) as (handle, real):
                size = os.fstat(handle.fileno()).st_size
                if size > self.settings.max_read_bytes:
                    raise FileTooLarge(str(real), size, self.settings.max_read_bytes)
                data = handle.read()
            mime = _MEDIA_TYPES.get(real.suffix.lower(), "application/octet-stream")
            kind = mime.split("/")[0] if mime.startswith(("image/", "audio/")) else "blob"
            return kind, mime, base64.b64encode(data).decode("ascii"), real

        return self._guard(path, read)

    def read_multiple_files(self, paths: Sequence[str]) -> str:
        """Each file's text, until the reply holds max_read_bytes characters (as one read may)
        or max_reply_entries files: the others are named, to be read in another call."""
        if not paths:
            raise FileSystemError("At least one file path must be provided")
        results = []
        room = self.settings.max_read_bytes
        limit = self.settings.max_reply_entries
        for path in paths[:limit]:
            if room <= 0:
                results.append(
                    f"{quote(path, 200)}: not read: this reply already holds "
                    f"max_read_bytes={self.settings.max_read_bytes} characters; read it in "
                    "another call"
                )
                continue
            try:
                text = self.read_text_file(path)
            except FileSystemError as exc:
                results.append(f"{quote(path, 200)}: Error - {exc}")
                continue
            if len(text) > room:
                results.append(
                    f"{quote(path, 200)}: not read: its {len(text):,} characters would take this "
                    f"reply past max_read_bytes={self.settings.max_read_bytes}; read it alone "
                    "with read_text_file"
                )
                continue
            room -= len(text)
            results.append(f"{path}:\n{text}\n")
        if len(paths) > limit:
            results.append(
                f"[{len(paths) - limit:,} more paths not read: a reply reads at most {limit:,} "
                "files (max_reply_entries); read them in another call]"
            )
        return "\n---\n".join(results)

    def list_directory(self, path: str, offset: int = 0) -> str:
        entries = self._guard(path, lambda: self.jail.scandir(path))
        lines = [
            f"{'[DIR]' if entry.kind == 'dir' else '[FILE]'} {entry.name}" for entry in entries
        ]
        narrow = "list a subfolder, or find entries by name with search_files"
        return "\n".join(self._paged(lines, offset, "entries", "list_directory", narrow))

    def list_directory_with_sizes(self, path: str, sort_by: str = "name", offset: int = 0) -> str:
        if sort_by not in ("name", "size"):
            raise FileSystemError(f"sortBy must be 'name' or 'size', got {sort_by!r}")
        entries = self._guard(path, lambda: self.jail.scandir(path))
        if sort_by == "size":
            entries = sorted(entries, key=lambda e: (e.kind == "dir", -e.size, e.name))
        lines = []
        files = dirs = total = 0
        for entry in entries:
            if entry.kind == "dir":
                dirs += 1
                lines.append(f"[DIR] {entry.name:<30}")
            else:
                files += 1
                total += entry.size
                lines.append(f"[FILE] {entry.name:<30} {format_size(entry.size):>10}")
        totals = ["", f"Total: {files} files, {dirs} directories"]
        totals.append(f"Combined size: {format_size(total)}")
        narrow = "list a subfolder, or find entries by name with search_files"
        used = sum(len(line) + 1 for line in totals)
        shown = self._paged(lines, offset, "entries", "list_directory_with_sizes", narrow, used)
        return "\n".join(shown + totals)

    def get_file_info(self, path: str) -> str:
        def info() -> str:
            with self.jail.resolve(path) as target:
                st = target.lstat()
                if st is None:
                    raise FileNotFoundError(
                        errno.ENOENT, "No such file or directory", str(target.path)
                    )
                real = target.path
            created = getattr(st, "st_birthtime", None)
            fields = {
                "path": str(real),
                "size": st.st_size,
                "created": _timestamp(created if created is not None else st.st_ctime),
                "modified": _timestamp(st.st_mtime),
                "accessed": _timestamp(st.st_atime),
                "isDirectory": stat.S_ISDIR(st.st_mode),
                "isFile": stat.S_ISREG(st.st_mode),
                "permissions": f"{stat.S_IMODE(st.st_mode):03o}",
            }
            return "\n".join(
                f"{key}: {str(value).lower() if isinstance(value, bool) else value}"
                for key, value in fields.items()
            )

        return self._guard(path, info)
