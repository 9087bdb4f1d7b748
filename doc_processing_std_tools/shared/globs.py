"""Glob patterns (minimatch style) compiled to RE2 regexes, so matching is linear.

Why RE2 (``google-re2``): Python's ``re`` backtracks, and globs with stars and
``{a,b}`` groups can make it take exponential time while holding the GIL, which
stalls every other call of the process. RE2 runs in time linear in the path, for
any pattern. A glob is translated straight to one regex (``{a,b}`` becomes an
alternation, never expanded), and a whole list of patterns (``excludePatterns``)
becomes a single regex, compiled once per list and cached.

Syntax: ``*`` (within one path part, dots included), ``?``, ``**`` as a whole
part (zero or more parts), ``[...]`` (``[!...]``/``[^...]`` negate; an invalid
range such as ``[z-a]`` matches nothing), ``{a,b}`` (nested; a group without a
comma is literal) and ``\\`` to escape. Paths are ``/``-separated and relative.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from ..exceptions import DptError
from .client_text import quote

MAX_PATTERN_CHARS = 4096  # one glob; longer than any path it could usefully match
MAX_PATTERNS = 256  # globs in one excludePatterns list
MAX_TOTAL_CHARS = 65_536  # all globs of one call together

_SPECIAL = set("\\.+*?()|[]{}^$")
_ANY_PART = "(?:[^/]*/)*"  # "**/": zero or more whole parts, each with its slash


class GlobError(DptError, ValueError):
    """A glob pattern (or list of them) over the documented limits or unusable."""


def check_patterns(patterns: Sequence[str], what: str = "excludePatterns") -> None:
    """Refuse, before any work, pattern lists over :data:`MAX_PATTERNS` or the size caps."""
    if len(patterns) > MAX_PATTERNS:
        raise GlobError(
            f"{what} holds {len(patterns):,} patterns; the limit is {MAX_PATTERNS}: "
            "merge them with {a,b} groups or search a narrower folder"
        )
    total = 0
    for pattern in patterns:
        check_pattern(pattern, what)
        total += len(pattern)
    if total > MAX_TOTAL_CHARS:
        raise GlobError(
            f"{what} holds {total:,} characters in all; the limit is {MAX_TOTAL_CHARS:,}"
        )


def check_pattern(pattern: str, what: str = "pattern") -> None:
    if len(pattern) > MAX_PATTERN_CHARS:
        raise GlobError(
            f"{what} {quote(pattern, 200)!s} is too long; the limit is "
            f"{MAX_PATTERN_CHARS:,} characters per pattern"
        )


def _escape(char: str) -> str:
    return "\\" + char if char in _SPECIAL else char


def _braces(pattern: str) -> tuple[dict[int, int], set[int]]:
    """Positions of the ``{``/``}`` pairs that hold a top-level comma (real groups), and
    of those commas. Braces of a group without a comma, and unbalanced ones, are literal.
    Braces come first, as in minimatch: ``[`` and ``]`` do not hide them."""
    pairs: dict[int, int] = {}
    commas: set[int] = set()
    stack: list[tuple[int, list[int]]] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            stack.append((i, []))
        elif c == "," and stack:
            stack[-1][1].append(i)
        elif c == "}" and stack:
            start, inner = stack.pop()
            if inner:
                pairs[start] = i
                commas.update(inner)
        i += 1
    return pairs, commas


def _class_end(pattern: str, start: int) -> int | None:
    """Index of the ``]`` closing the class opened at *start* within one path part, or None
    (then ``[`` is literal)."""
    j = start + 1
    if j < len(pattern) and pattern[j] in "!^":
        j += 1
    if j < len(pattern) and pattern[j] == "]":
        j += 1  # a leading ] is part of the set
    while j < len(pattern):
        if pattern[j] == "\\":
            j += 2
            continue
        if pattern[j] == "/":
            return None  # a class never spans parts: "[a/b]" is literal, as in minimatch
        if pattern[j] == "]":
            return j
        j += 1
    return None


def _class(body: str) -> str:
    """A ``[...]`` body (without brackets) as an RE2 class that never matches ``/``."""
    negate = body[:1] in ("!", "^")
    if negate:
        body = body[1:]
    chars: list[str] = []
    i = 0
    while i < len(body):
        if body[i] == "\\" and i + 1 < len(body):
            i += 1
        chars.append(body[i])
        i += 1
    ranges: list[tuple[int, int]] = []
    i = 0
    while i < len(chars):
        if i + 2 < len(chars) and chars[i + 1] == "-":
            low, high = ord(chars[i]), ord(chars[i + 2])
            i += 3
        else:
            low = high = ord(chars[i])
            i += 1
        if low > high:
            continue  # an invalid range matches nothing (as in fnmatch)
        slash = ord("/")
        if low <= slash <= high:  # a part never holds "/": cut it out of the range
            if low < slash:
                ranges.append((low, slash - 1))
            if slash < high:
                ranges.append((slash + 1, high))
        else:
            ranges.append((low, high))
    items = "".join(
        f"\\x{{{low:x}}}" if low == high else f"\\x{{{low:x}}}-\\x{{{high:x}}}"
        for low, high in ranges
    )
    if negate:
        return f"[^/{items}]"
    return f"[{items}]" if items else "[^\\x{0}-\\x{10ffff}]"


def translate(pattern: str) -> str:
    """The RE2 regex (unanchored) for one glob matched against a whole relative path."""
    pattern = pattern.removeprefix("./").strip("/")
    pairs, commas = _braces(pattern)
    closers = set(pairs.values())
    out: list[str] = []
    i, n = 0, len(pattern)

    def boundary_before(index: int) -> bool:
        return index < 0 or pattern[index] == "/" or index in pairs or index in commas

    def boundary_after(index: int) -> bool:
        return index >= n or pattern[index] == "/" or index in commas or index in closers

    while i < n:
        c = pattern[i]
        if c == "\\":
            out.append(_escape(pattern[i + 1] if i + 1 < n else "\\"))  # a last "\\" is literal
            i += 2
        elif c == "/":
            j = i
            while j < n and pattern[j] == "/":
                j += 1  # "a//b" is "a/b"
            leading = i == 0 or boundary_before(i - 1)
            if leading or j >= n or j in commas or j in closers:
                i = j  # a slash at either end of a path adds nothing
            elif (
                pattern.startswith("**", j)
                and (j + 2 >= n or boundary_after(j + 2))
                and (j + 2 >= n or pattern[j + 2] != "/")
            ):
                out.append("(?:/.*)?")  # "a/**" matches a and everything below it
                i = j + 2
            else:
                out.append("/")
                i = j
        elif c == "*":
            j = i
            while j < n and pattern[j] == "*":
                j += 1
            if j - i == 2 and boundary_before(i - 1) and boundary_after(j):
                if j < n and pattern[j] == "/":
                    while j < n and pattern[j] == "/":
                        j += 1
                    out.append(_ANY_PART)
                else:
                    out.append(".*")  # "**" alone: any path
            else:
                out.append("[^/]*")
            i = j
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif (
            c == "["
            and (end := _class_end(pattern, i)) is not None
            and not any(k in pairs or k in commas or k in closers for k in range(i, end))
        ):
            out.append(_class(pattern[i + 1 : end]))
            i = end + 1
        elif i in pairs:
            out.append("(?:")
            i += 1
        elif i in commas:
            out.append("|")
            i += 1
        elif i in closers:
            out.append(")")
            i += 1
        else:
            out.append(_escape(c))
            i += 1
    return "".join(out)


def _anywhere(regex: str) -> str:
    """The reference server's rule for a pattern without ``*``: it also matches that
    name (or path) at any depth, with everything below it."""
    return f"{_ANY_PART}(?:{regex})(?:/.*)?"


@lru_cache(maxsize=64)
def _compiled(patterns: tuple[str, ...], anywhere: bool) -> Any:
    # (here, not at the top: only a call with a glob needs RE2, 4 ms; tests/filesystem checks)
    import re2

    parts = []
    for pattern in patterns:
        regex = translate(pattern)
        parts.append(_anywhere(regex) if anywhere and "*" not in pattern else regex)
    options = re2.Options()
    options.max_mem = 64 << 20
    options.log_errors = False
    try:
        return re2.compile(
            _utf8("|".join(f"(?:{part})" for part in parts) or "[^\\x{0}-\\x{10ffff}]"), options
        )
    except re2.error:
        shown = quote(", ".join(patterns), 200)
        raise GlobError(f"the glob patterns {shown} are too complex to compile") from None


class Globs:
    """A list of globs as one compiled matcher: ``globs.match(relative_path)``."""

    def __init__(self, patterns: Sequence[str], *, anywhere: bool = False, what: str = "") -> None:
        check_patterns(patterns, what or "excludePatterns")
        self._regex = _compiled(tuple(patterns), anywhere) if patterns else None

    def match(self, relative: str) -> bool:
        if self._regex is None:
            return False
        return self._regex.fullmatch(_utf8(relative)) is not None


def _utf8(text: str) -> str:
    """*text* that RE2 can encode: undecodable file-name bytes (surrogate escapes)
    become U+FFFD, one per byte, so ``?`` still stands for one of them."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return text


def glob_match(relative: str, pattern: str) -> bool:
    """Whether the ``/``-separated *relative* path matches one glob."""
    return Globs([pattern], what="pattern").match(relative)
