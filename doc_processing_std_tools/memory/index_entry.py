"""One entry of the memory index (:mod:`.index`) as kept in memory and saved (:mod:`.index_file`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

TEXT, NOT_UTF8, LARGE, UNREADABLE = range(4)  # kinds of entries


class IndexedEntry(NamedTuple):
    """What the index knows of one ``<key>.json`` entry (a tuple: thousands are made at once)."""

    name: str  # the file name
    # (inode, size, mtime_ns, ctime_ns) proving the content unchanged; None when nothing
    # can (a file changed just before it was read, a symlink, an unreadable file)
    sig: tuple[int, int, int, int] | None
    kind: int  # TEXT, NOT_UTF8, LARGE or UNREADABLE
    key: str
    size: int  # bytes, when read
    value: str | None  # a TEXT entry's value; None when not kept (over the budget)
    folded_key: str
    folded_value: str | None  # value.casefold(), the same object when equal

    def without_value(self) -> IndexedEntry:
        return self._replace(value=None, folded_value=None)

    @property
    def cost(self) -> int:
        """Characters kept in memory for the value."""
        if self.value is None:
            return 0
        return len(self.value) * (1 if self.folded_value is self.value else 2)


def matches(
    entries: Iterable[IndexedEntry], needle: str, value_of: Callable[[IndexedEntry], str | None]
) -> list[dict[str, Any]]:
    """``search_memory``'s hits, sorted by key: entries whose key or text value holds *needle*
    (casefolded), and large entries whose key does. *value_of* reads a text value the index
    did not keep (each store its own way); None skips the entry (gone, or not text)."""
    results: list[dict[str, Any]] = []
    for entry in entries:
        if entry.kind == TEXT:
            value, folded = entry.value, entry.folded_value
            if value is None or folded is None:  # not kept in memory: read it now
                value = value_of(entry)
                if value is None:
                    continue
                folded = value.casefold() if needle not in entry.folded_key else ""
            if needle in entry.folded_key or needle in folded:
                results.append({"key": entry.key, "value": value})
        elif entry.kind == LARGE and needle in entry.folded_key:
            results.append({"key": entry.key, "value": None, "size": entry.size})
    results.sort(key=lambda item: item["key"])
    return results
