"""The text formats of memory-tools: ``<key>.json`` entries, numbered lines and edit snippets, and the store's error type."""

from __future__ import annotations

import json
import re
from json.encoder import encode_basestring, encode_basestring_ascii
from typing import TYPE_CHECKING, Any

from ..exceptions import DptError
from ..shared.client_text import QUOTE_LIMIT, quote

if TYPE_CHECKING:
    pass


MAX_KEY_FILE_BYTES = 200  # the key's file name, ".json" included, in UTF-8


MAX_LINES = 999_999


LINE_NUMBER_WIDTH = 6


RESERVED_PREFIX = ".dpt"  # ".dpt.lock" and ".dpt-tmp-*"


MAX_PATH_CHARS = 4096  # PATH_MAX: longer paths would only make very deep folder chains


MAX_LISTED_OCCURRENCES = 20  # lines named when memory_str_replace finds old_str many times


HEAD_BYTES = 4096  # read of an entry's start that names its key (keys are <= 200 bytes)


class MemoryStoreError(DptError):
    """A refused or failed operation; the message is meant for the user."""


def _flatten_key(key: str) -> str:
    return key.replace("/", "_").replace("\\", "_")


def _split_lines(content: str) -> list[str]:
    """Split on LF (a CR stays), without the empty tail after a final newline."""
    if not content:
        return []
    lines = content.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def _numbered(lines: list[str], start: int, end: int) -> str:
    """Lines[start:end] numbered from start + 1, right-aligned to 6 columns, then a tab."""
    return "\n".join(f"{i + 1:>{LINE_NUMBER_WIDTH}}\t{lines[i]}" for i in range(start, end))


def _snippet(lines: list[str], first: int, last: int) -> str:
    """The changed lines [first, last] (0-based) with two lines of context each side."""
    return _numbered(lines, max(0, first - 2), min(len(lines), last + 3))


def _edited(header: str, snippet: str) -> str:
    """A success reply: *header* and the snippet, the snippet cut to QUOTE_LIMIT characters
    (a 2 MB insert is not sent back whole; memory_view shows the rest)."""
    if len(snippet) > QUOTE_LIMIT:
        rest = snippet.count("\n", QUOTE_LIMIT)
        snippet = (
            f"{snippet[:QUOTE_LIMIT]}… (the snippet goes on for {len(snippet) - QUOTE_LIMIT:,} "
            f"more characters and {rest:,} more lines: use memory_view with a view_range)"
        )
    return f"{header} Here is the snippet showing the change (with line numbers):\n{snippet}"


def _snippet_at(content: str, first: int, last: int) -> str:
    """Like :func:`_snippet` on ``_split_lines(content)``, without splitting the whole text."""
    start_line = max(0, first - 2)
    start = 0
    for _ in range(start_line):  # at most first - 2 finds, each resuming where the last stopped
        start = content.find("\n", start) + 1
    lines: list[str] = []
    pos = start
    while len(lines) < last + 3 - start_line and pos < len(content):
        end = content.find("\n", pos)
        if end == -1:
            lines.append(content[pos:])
            break
        lines.append(content[pos:end])
        pos = end + 1
    return "\n".join(
        f"{start_line + i + 1:>{LINE_NUMBER_WIDTH}}\t{line}" for i, line in enumerate(lines)
    )


def _multiple_occurrences(content: str, old_str: str, pos: int) -> str:
    """The refusal for an old_str found more than once: its lines, at most
    MAX_LISTED_OCCURRENCES of them (linear in the text, whatever the count)."""
    lines: list[int] = []
    line, counted = 1, 0
    while pos != -1 and len(lines) < MAX_LISTED_OCCURRENCES:
        line += content.count("\n", counted, pos)
        counted = pos
        lines.append(line)
        pos = content.find(old_str, pos + len(old_str))
    listed = ", ".join(map(str, lines))
    if pos == -1:
        return (
            f"No replacement was performed. Multiple occurrences of old_str `{quote(old_str)}` "
            f"in lines: {listed}. Please ensure it is unique"
        )
    total = content.count(old_str)
    return (
        f"No replacement was performed. old_str `{quote(old_str)}` occurs {total:,} times; "
        f"the first {len(lines)} are in lines: {listed}. Please ensure it is unique"
    )


def _decode_text(data: bytes, display: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise MemoryStoreError(
            f"The file {display} is not UTF-8 text and cannot be shown or edited"
        ) from None


def checked_path(path: str, parts: list[str]) -> str:
    """The display form of *path* (split into *parts*), once it is within the length limit and
    names nothing reserved: every store refuses the same paths with the same words."""
    display = quote("/" + "/".join(parts))
    if len(path) > MAX_PATH_CHARS:
        raise MemoryStoreError(
            f"The path {display} is {len(path):,} characters long; the limit is {MAX_PATH_CHARS:,}"
        )
    for part in parts:
        if part.startswith(RESERVED_PREFIX):
            raise MemoryStoreError(
                f"The path {display} uses the reserved name {part!r}: names starting with "
                f"{RESERVED_PREFIX!r} belong to the memory server"
            )
    return display


def file_view(data: bytes, display: str, view_range: list[int] | None) -> str:
    """``view`` of a file, as Anthropic's memory tool words it: numbered lines, optionally a
    range of them (every store reads its bytes its own way, then answers the same text)."""
    lines = _split_lines(_decode_text(data, display))
    if len(lines) > MAX_LINES:
        raise MemoryStoreError(f"File {display} exceeds maximum line limit of {MAX_LINES:,} lines.")
    start, end = 0, len(lines)
    if view_range is not None:
        if len(view_range) != 2:
            raise MemoryStoreError(
                f"Invalid `view_range` parameter: {quote(view_range)}. It should be a list of two "
                "integers [start, end] (1-based; end -1 means to the end of the file)."
            )
        first, last = view_range
        if first < 1 or first > max(len(lines), 1):
            raise MemoryStoreError(
                f"Invalid `view_range` parameter: {quote(view_range)}. Its first element `{first}` "
                f"should be within the range of lines of the file: [1, {len(lines)}]."
            )
        if last != -1 and last < first:
            raise MemoryStoreError(
                f"Invalid `view_range` parameter: {quote(view_range)}. Its second element `{last}` "
                f"should be -1 (to the end) or at least the first element `{first}`."
            )
        start = first - 1
        end = len(lines) if last == -1 else min(last, len(lines))
    header = f"Here's the content of {display} with line numbers:"
    body = _numbered(lines, start, end)
    return f"{header}\n{body}" if body else header


def _encode_text(text: str, display: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise MemoryStoreError(f"Cannot write {display}: the text is not valid Unicode") from None


def _human_size(size: int) -> str:
    units = ("B", "K", "M", "G")
    index = min((size.bit_length() - 1) // 10, len(units) - 1) if size > 0 else 0
    scaled = size / 1024**index
    if scaled == int(scaled):
        return f"{int(scaled)}{units[index]}"
    return f"{scaled:.1f}{units[index]}"


def _encode_json(obj: Any) -> bytes:
    try:
        return (json.dumps(obj, ensure_ascii=False, indent=2) + "\n").encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: keep them as \\u escapes
        return (json.dumps(obj, indent=2) + "\n").encode("ascii")


def _encode_entry(key: str, value: str) -> bytes:
    """``_encode_json({"key": key, "value": value})``, byte for byte, in one pass over the
    value (json.dumps with an indent takes its slower pure-Python path)."""
    try:
        text = (
            f'{{\n  "key": {encode_basestring(key)},\n  "value": {encode_basestring(value)}\n}}\n'
        )
        return text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: keep them as \\u escapes
        text = (
            f'{{\n  "key": {encode_basestring_ascii(key)},\n'
            f'  "value": {encode_basestring_ascii(value)}\n}}\n'
        )
        return text.encode("ascii")


def _decode_entry(stem: str, data: bytes) -> tuple[str, str | None]:
    """(key, value) of a top-level .json file; value None when it is not UTF-8 text."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return stem, None
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return stem, text
    if (
        isinstance(obj, dict)
        and isinstance(obj.get("key"), str)
        and isinstance(obj.get("value"), str)
    ):
        # The file name is authoritative: a stored key that no longer matches it
        # (the file was renamed) is reported under the file's name.
        key = obj["key"] if _flatten_key(obj["key"]) == stem else stem
        return key, obj["value"]
    return stem, text


# Our own layout, ``{"key": "...", "value": "...``, as _encode_json writes it.
_KEY_HEAD = re.compile(rb'\A\s*\{\s*"key"\s*:\s*("(?:[^"\\\x00-\x1f]|\\.)*")\s*,\s*"value"\s*:\s*"')


def is_entry_head(head: bytes) -> bool:
    """Whether *head* (a file's first bytes) starts as write_memory writes an entry."""
    return _KEY_HEAD.match(head) is not None


def _key_in_head(stem: str, head: bytes) -> str:
    """The key named in the first bytes of an entry written by write_memory, else the stem.

    For entries too large to decode whole: the key comes first, so the head names it.
    """
    match = _KEY_HEAD.match(head)
    if match is None:
        return stem
    try:
        key = json.loads(match.group(1))
    except ValueError:
        return stem
    return key if isinstance(key, str) and _flatten_key(key) == stem else stem
