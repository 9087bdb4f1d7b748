"""directory_tree and search_files: iterative walks, bounded depth and entries, linear globs."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from contextlib import closing
from typing import TYPE_CHECKING, Any

from ..shared.client_text import quote
from ..shared.globs import GlobError, Globs, check_pattern

if TYPE_CHECKING:
    pass
from ..containment import Entry
from ..shared.reply_bounds import NOTE_ROOM
from .base import MAX_TREE_DEPTH, FileSystemError, RootedFileSystem


class WalkTools(RootedFileSystem):
    """directory_tree and search_files: iterative walks with linear glob matching."""

    def directory_tree(self, path: str, exclude_patterns: Sequence[str] = ()) -> str:
        excluded = self._globs(exclude_patterns, "excludePatterns", anywhere=True)

        def collect() -> tuple[list[tuple[int, str, Entry]], bool]:
            found: list[tuple[int, str, Entry]] = []
            walk = self.jail.walk_relative(
                path,
                max_depth=MAX_TREE_DEPTH,
                exclude=lambda relative, _entry: excluded.match(relative),
            )
            with closing(walk):
                for seen, item in enumerate(walk):
                    if seen >= self.settings.max_entries:
                        return found, True
                    found.append(item)
            return found, False

        found, truncated = self._guard(path, collect)
        bounds = self.settings.reply_bounds
        shown = min(len(found), bounds.entries)
        while True:  # fewer entries until the whole reply fits (a few rounds at most)
            text = self._tree_reply(path, found, shown, truncated)
            if len(text) <= bounds.chars or shown == 0:
                return text
            shown = min(shown - 1, shown * (bounds.chars - NOTE_ROOM) // len(text))

    def _tree_reply(
        self, path: str, found: list[tuple[int, str, Entry]], shown: int, truncated: bool
    ) -> str:
        """directory_tree's reply holding the first *shown* entries of *found* (depth first)."""
        top: list[dict[str, Any]] = []
        stack: list[list[dict[str, Any]]] = [top]
        cut: list[str] = []  # folders at MAX_TREE_DEPTH whose contents are left out
        for depth, relative, entry in found[:shown]:
            del stack[depth:]
            node: dict[str, Any] = {
                "name": entry.name,
                "type": "directory" if entry.kind == "dir" else "file",
            }
            stack[-1].append(node)
            if entry.kind == "dir":
                node["children"] = []
                stack.append(node["children"])
                if depth == MAX_TREE_DEPTH:
                    cut.append(relative)
        text = json.dumps(top, indent=2, ensure_ascii=False)
        if cut:
            deeper = os.path.join(self.jail.display(path), cut[0])
            text += (
                f"\n\n[{len(cut)} folder(s) at depth {MAX_TREE_DEPTH} are shown without "
                f"their contents (the tree's depth limit); call directory_tree on a deeper "
                f"path, e.g. {quote(deeper, 300)}]"
            )
        if shown < len(found):
            how = "call directory_tree on a subfolder, or add excludePatterns"
            more = len(found) - shown
            text += "\n\n" + self.settings.reply_bounds.note(more, "entries", how, truncated)
        elif truncated:
            text += (
                f"\n\n[Stopped at max_entries={self.settings.max_entries} entries: the tree "
                "is incomplete; pick a deeper path or add excludePatterns]"
            )
        return text

    def _globs(self, patterns: Sequence[str], what: str, *, anywhere: bool = False) -> Globs:
        try:
            return Globs(patterns, anywhere=anywhere, what=what)
        except GlobError as exc:
            raise FileSystemError(f"Invalid {what}: {exc}") from None

    def search_files(
        self, path: str, pattern: str, exclude_patterns: Sequence[str] = (), offset: int = 0
    ) -> str:
        if not pattern:
            raise FileSystemError("pattern must not be empty")
        try:
            check_pattern(pattern)
        except GlobError as exc:
            raise FileSystemError(str(exc)) from None
        wanted = self._globs([pattern], "pattern")
        excluded = self._globs(exclude_patterns, "excludePatterns")

        def search() -> tuple[list[str], bool]:
            matches: list[str] = []
            walk = self.jail.walk_relative(
                path, exclude=lambda relative, _entry: excluded.match(relative)
            )
            with closing(walk):
                for seen, (_depth, relative, entry) in enumerate(walk):
                    if seen >= self.settings.max_entries:
                        return matches, True
                    if wanted.match(relative):
                        matches.append(str(entry.path))
            return matches, False

        matches, truncated = self._guard(path, search)
        stop = ""
        if truncated:
            stop = (
                f"[Search stopped after max_entries={self.settings.max_entries} entries: "
                "results may be incomplete; search a deeper path or add excludePatterns]"
            )
        narrow = "use a narrower pattern or path"
        lines = self._paged(matches, offset, "matches", "search_files", narrow, len(stop) + 1)
        if not matches:
            text = "No matches found"
        elif not lines:
            text = f"No matches past offset {offset}: {len(matches):,} in all"
        else:
            text = "\n".join(lines)
        return f"{text}\n{stop}" if stop else text
