"""The filesystem tools that write: write_file, create_directory, move_file, edit_file."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .. import locking

if TYPE_CHECKING:
    pass
from .base import FileSystemError, RootedFileSystem
from .edits import EDIT_ATTEMPTS, apply_edit, unified_diff


class WriteTools(RootedFileSystem):
    """The tools that change files: each change holds the locks only for its disk work."""

    def write_file(self, path: str, content: str) -> str:
        def write() -> None:
            with locking.exclusive(folders=self._locks(path)):
                try:
                    self.jail.write_atomic(path, content.encode("utf-8"), mode=self.file_mode)
                except FileNotFoundError as exc:
                    raise FileSystemError(
                        f"Parent directory does not exist: {exc.filename}"
                    ) from None

        self._guard(path, write)
        return f"Successfully wrote to {path}"

    def create_directory(self, path: str) -> str:
        def mkdir() -> None:
            with locking.exclusive(folders=self._locks(path)):
                self.jail.mkdir(path, parents=True, exist_ok=True, mode=self.dir_mode)

        self._guard(path, mkdir)
        return f"Successfully created directory {path}"

    def move_file(self, source: str, destination: str) -> str:
        def move() -> None:
            with locking.exclusive(folders=self._locks(source, destination)):
                with self.jail.resolve(source, follow_last=False) as target:
                    missing = target.lstat() is None
                if missing:
                    raise FileSystemError(f"No such file or directory: {self.jail.display(source)}")
                try:
                    self.jail.rename(source, destination)
                except FileNotFoundError as exc:
                    raise FileSystemError(
                        f"Parent directory does not exist: {exc.filename}"
                    ) from None
                except FileExistsError:
                    raise FileSystemError(
                        f"Destination already exists: {self.jail.display(destination)}"
                    ) from None

        self._guard(source, move)
        return f"Successfully moved {source} to {destination}"

    def edit_file(self, path: str, edits: Sequence[tuple[str, str]], dry_run: bool = False) -> str:
        """Match and diff with no lock held (the slow part, linear in the file's size), then,
        under the locks, write only if the file still holds what was matched."""
        if not edits:
            raise FileSystemError("edits must contain at least one {oldText, newText} pair")
        limit = self.settings.max_read_bytes
        size = sum(len(old) + len(new) for old, new in edits)
        if size > limit:
            raise FileSystemError(
                f"edits hold {size:,} characters; the limit is max_read_bytes={limit:,} "
                "(for bigger changes use write_file)"
            )
        shown = self.jail.display(path)

        def plan() -> tuple[bytes, str, str, bool]:
            raw = self.jail.read_bytes(path, limit=limit)
            original = raw.decode("utf-8")
            crlf = "\r\n" in original and original.count("\r\n") == original.count("\n")
            text = original.replace("\r\n", "\n") if crlf else original
            modified = text
            for old, new in edits:
                modified = apply_edit(modified, old, new, crlf=crlf)
            return raw, text, modified, crlf

        def edit() -> str:
            for _attempt in range(EDIT_ATTEMPTS - 1):
                raw, text, modified, crlf = plan()
                diff = unified_diff(text, modified, shown)
                if dry_run or modified == text:
                    return diff
                out = (modified.replace("\n", "\r\n") if crlf else modified).encode("utf-8")
                with locking.exclusive(folders=self._locks(path)):
                    if self.jail.read_bytes(path, limit=limit) == raw:
                        self.jail.write_atomic(path, out)
                        return diff
                # Another writer changed the file while we matched: match again.
            # Writers keep changing it: match under the locks this time (linear, so bounded).
            with locking.exclusive(folders=self._locks(path)):
                _raw, text, modified, crlf = plan()
                if not dry_run and modified != text:
                    out = (modified.replace("\n", "\r\n") if crlf else modified).encode("utf-8")
                    self.jail.write_atomic(path, out)
            return unified_diff(text, modified, shown)

        return self._guard(path, edit)
