"""The file tools modelled on Anthropic's memory tool: view, create, str_replace, insert, delete, rename."""

from __future__ import annotations

import errno
import os
import stat
from typing import TYPE_CHECKING

from ..containment import Jail, rmtree_at
from ..shared.client_text import quote

if TYPE_CHECKING:
    pass
from .folder import MemoryFolder
from .formats import (
    MemoryStoreError,
    _edited,
    _human_size,
    _multiple_occurrences,
    _snippet,
    _snippet_at,
    _split_lines,
    file_view,
)
from .replies import folder_reply


class FileCommands(MemoryFolder):
    """The file tools modelled on Anthropic's memory tool (memory_view, memory_create,
    memory_str_replace, memory_insert, memory_delete, memory_rename)."""

    def view(self, path: str, view_range: list[int] | None = None) -> str:
        parts, display = self._parse_path(path)
        jail = self._jail()
        target = self._abs(jail, parts)
        with self._guard(display, "view"):
            info = jail.lstat(target)
            if stat.S_ISDIR(info.st_mode):
                if view_range is not None:
                    raise MemoryStoreError(
                        f"The `view_range` parameter is not allowed when {display} is a directory"
                    )
                return self._view_dir(jail, target, display, info)
        if not stat.S_ISREG(info.st_mode):
            raise MemoryStoreError(f"Unsupported file type for {display}")
        with self._guard(display, "read"):
            data = jail.read_bytes(target)
        return file_view(data, display, view_range)

    def _view_dir(self, jail: Jail, target: str, display: str, info: os.stat_result) -> str:
        base = jail.realpath(target)
        prefix = display.rstrip("/")
        rows = [f"{_human_size(info.st_size)}\t{display}"]
        hidden = lambda entry: entry.name.startswith(".")  # noqa: E731
        for _depth, entry in jail.walk(target, max_depth=2, exclude=hidden):
            rel = entry.path.relative_to(base)
            kind, size = entry.kind, entry.size
            if kind == "symlink":  # shown as what it points to, when that is inside
                try:
                    linked = jail.lstat(str(entry.path))
                except (OSError, ValueError):
                    continue
                kind = "dir" if stat.S_ISDIR(linked.st_mode) else "file"
                if not (stat.S_ISDIR(linked.st_mode) or stat.S_ISREG(linked.st_mode)):
                    continue
                size = linked.st_size
            if kind == "dir":
                rows.append(f"{_human_size(size)}\t{prefix}/{rel.as_posix()}/")
            elif kind == "file":
                rows.append(f"{_human_size(size)}\t{prefix}/{rel.as_posix()}")
        header = (
            f"Here're the files and directories up to 2 levels deep in {display}, "
            "excluding hidden items:"
        )
        return folder_reply(header, rows, self.bounds)

    def create(self, path: str, file_text: str) -> str:
        parts, display = self._parse_path(path)
        if not parts:
            raise MemoryStoreError("The path / is the memory directory; give a file path")
        try:
            data = file_text.encode("utf-8")
        except UnicodeEncodeError:
            raise MemoryStoreError(
                f"Cannot write {display}: the text is not valid Unicode"
            ) from None
        with self._locked() as jail, self._guard(display, "create"):
            try:
                jail.write_atomic(self._abs(jail, parts), data, create_parents=True, exclusive=True)
            except FileExistsError:
                raise MemoryStoreError(f"File {display} already exists") from None
        return f"File created successfully at: {display}"

    def str_replace(self, path: str, old_str: str, new_str: str) -> str:
        parts, display = self._parse_path(path)
        if old_str == "":
            raise MemoryStoreError("No replacement was performed: old_str must not be empty.")

        def change(content: str) -> tuple[str, str]:
            pos = content.find(old_str)
            if pos == -1:
                raise MemoryStoreError(
                    f"No replacement was performed, old_str `{quote(old_str)}` did not appear "
                    f"verbatim in {display}."
                )
            if content.find(old_str, pos + len(old_str)) != -1:  # as str.count: no overlaps
                raise MemoryStoreError(_multiple_occurrences(content, old_str, pos))
            new_content = content[:pos] + new_str + content[pos + len(old_str) :]
            first = content.count("\n", 0, pos)
            snippet = _snippet_at(new_content, first, first + new_str.count("\n"))
            return new_content, _edited("The memory file has been edited.", snippet)

        return self._edit(parts, display, change)

    def insert(self, path: str, insert_line: int, insert_text: str) -> str:
        parts, display = self._parse_path(path)

        def change(content: str) -> tuple[str, str]:
            lines = _split_lines(content)
            if insert_line < 0 or insert_line > len(lines):
                raise MemoryStoreError(
                    f"Invalid `insert_line` parameter: {quote(insert_line)}. It should be within "
                    f"the range [0, {len(lines)}]."
                )
            text = insert_text[:-1] if insert_text.endswith("\n") else insert_text
            new_lines = text.split("\n")
            result = [*lines[:insert_line], *new_lines, *lines[insert_line:]]
            snippet = _snippet(result, insert_line, insert_line + len(new_lines) - 1)
            return "\n".join(result) + "\n", _edited(
                f"The file {display} has been edited.", snippet
            )

        return self._edit(parts, display, change)

    def delete_path(self, path: str) -> str:
        parts, display = self._parse_path(path)
        refuse = MemoryStoreError("Cannot delete the memory directory itself")
        if not parts:
            raise refuse
        with self._locked() as jail:
            target = self._abs(jail, parts)
            with self._guard(display, "delete", f"The path {display} does not exist"):
                if jail.realpath(target) == jail.roots[0]:
                    raise refuse
                with jail.resolve(target, follow_last=False) as found:
                    info = found.lstat()
                    if found.name is None or info is None:
                        raise FileNotFoundError(errno.ENOENT, "No such file or directory")
                    if stat.S_ISDIR(info.st_mode):
                        rmtree_at(found.parent_fd, found.name)  # at any depth and width
                    else:
                        os.unlink(found.name, dir_fd=found.parent_fd)
        return f"Successfully deleted {display}"

    def rename(self, old_path: str, new_path: str) -> str:
        old_parts, old_display = self._parse_path(old_path)
        new_parts, new_display = self._parse_path(new_path)
        if not old_parts:
            raise MemoryStoreError("Cannot rename the memory directory itself")
        with self._locked() as jail:
            source = self._abs(jail, old_parts)
            destination = self._abs(jail, new_parts)
            with self._guard(old_display, "rename"):
                if jail.realpath(source) == jail.roots[0]:
                    raise MemoryStoreError("Cannot rename the memory directory itself")
                with jail.resolve(source, follow_last=False) as found:
                    if found.lstat() is None:
                        raise MemoryStoreError(f"The path {old_display} does not exist")
            with self._guard(new_display, "rename to"):
                try:
                    with jail.resolve(destination, follow_last=False) as found:
                        if found.is_root or found.lstat() is not None:
                            raise MemoryStoreError(f"The destination {new_display} already exists")
                except FileNotFoundError:
                    pass  # a missing parent folder is created below
                try:
                    jail.rename(source, destination, create_parents=True)
                except FileExistsError:
                    raise MemoryStoreError(
                        f"The destination {new_display} already exists"
                    ) from None
                except OSError as exc:
                    if exc.errno == errno.EINVAL:
                        raise MemoryStoreError(
                            f"Cannot move {old_display} into itself ({new_display})"
                        ) from None
                    raise
        return f"Successfully renamed {old_display} to {new_display}"
