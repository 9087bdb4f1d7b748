"""The replies of search_memory, list_memory_keys and memory_view of a folder, cut to the reply
caps (:mod:`..shared.reply_bounds`): one function per tool, shared by the folder and Redis
stores, so both answer the same text.

search_memory and list_memory_keys answer a JSON list when it holds every result from ``offset``
on; otherwise a JSON object whose ``note`` says which ones it holds, how many more there are and
how to get them (``next_offset``), with the page under ``results`` or ``keys``.
"""

from __future__ import annotations

import json
from typing import Any

from ..shared.reply_bounds import NOTE_ROOM, ReplyBounds
from .formats import MemoryStoreError

_SEPARATOR = 2  # ", " between the items of a JSON list


def check_offset(offset: Any) -> int:
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise MemoryStoreError(f"The offset must be an integer, got {type(offset).__name__}")
    if offset < 0:
        raise MemoryStoreError(f"The offset must be 0 or more, got {offset}")
    return offset


def _json(item: Any) -> str:
    return json.dumps(item, ensure_ascii=False)


def _page(
    items: list[Any], offset: int, bounds: ReplyBounds, tool: str, field: str, narrow: str
) -> str:
    """The reply for *items* from *offset* on."""
    rest = items[offset:]
    texts = bounds.take((_json(item) for item in rest), separator=_SEPARATOR)
    listed = "[" + ", ".join(texts) + "]"
    if len(texts) == len(rest):
        return listed
    shown, total = len(texts), len(items)
    note = (
        f"{field.capitalize()} {offset + 1:,}-{offset + shown:,} of {total:,} ({total - offset - shown:,} more): "
        f"{bounds.stops_at()}. Call {tool} again with offset={offset + shown} for the next "
        f"ones, or {narrow}."
    )
    head = _json({"note": note, "total": total, "next_offset": offset + shown})
    return f'{head[:-1]}, "{field}": {listed}}}'


def search_reply(results: list[dict[str, Any]], offset: int, bounds: ReplyBounds) -> str:
    """search_memory's reply. A value too large for a whole reply is listed as entries over
    1 MiB are: ``"value": null`` and its ``"size"`` in bytes (read it with read_memory)."""
    offset = check_offset(offset)
    if offset < len(results) and len(_json(results[offset])) > bounds.chars - NOTE_ROOM:
        first = results[offset]
        size = first.get("size")
        if size is None:
            size = len(first["value"].encode("utf-8", "surrogatepass"))
        stub = {"key": first["key"], "value": None, "size": size}
        results = [*results[:offset], stub, *results[offset + 1 :]]
    return _page(results, offset, bounds, "search_memory", "results", "narrow the query")


def keys_reply(keys: list[str], offset: int, bounds: ReplyBounds) -> str:
    """list_memory_keys' reply (keys are at most 200 bytes: one always fits)."""
    offset = check_offset(offset)
    narrow = "find keys by part of their name with search_memory"
    return _page(keys, offset, bounds, "list_memory_keys", "keys", narrow)


def folder_reply(header: str, rows: list[str], bounds: ReplyBounds) -> str:
    """memory_view's listing of a folder: *header*, then *rows* (the first: the folder itself),
    cut with a last line saying how many more and how to narrow."""
    own, rest = rows[0], rows[1:]
    shown = bounds.take(rest, used=len(header) + len(own) + 2)
    lines = [header, own, *shown]
    if len(shown) < len(rest):
        lines.append(
            bounds.note(
                len(rest) - len(shown),
                "entries",
                "view one of the folders listed to see its part, or find keys with "
                "list_memory_keys or search_memory",
            )
        )
    return "\n".join(lines)
