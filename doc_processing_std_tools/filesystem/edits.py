"""edit_file's text work, done before any lock: matching (exact, then whitespace-flexible) and the unified diff."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..shared.client_text import quote
from ..shared.diffs import unified_lines

if TYPE_CHECKING:
    pass
from .base import FileSystemError

# edit_file matches without the lock, then writes only if the file is unchanged; when other
# writers keep changing the file, its last attempt (of this many) matches under the locks.
EDIT_ATTEMPTS = 3


def apply_edit(text: str, old: str, new: str, *, crlf: bool = False) -> str:
    """Replace the first match of *old* in *text* (LF line endings) with *new*.

    Exact match first; else the first run of lines equal to *old*'s lines ignoring
    leading/trailing whitespace, replaced by *new* re-indented to the match. Both
    searches are one substring search (linear in the text, whatever *old* is): the
    whitespace-flexible one looks for *old*'s stripped lines in the file's stripped
    lines, joined by newlines and framed by newlines so only whole lines match.
    """
    if crlf or "\r\n" not in text:
        old = old.replace("\r\n", "\n")
        new = new.replace("\r\n", "\n")
    if not old:
        raise FileSystemError("oldText must not be empty")
    at = text.find(old)
    if at >= 0:
        return text[:at] + new + text[at + len(old) :]
    old_lines = old.strip("\n").split("\n")
    lines = text.split("\n")
    wanted = "\n" + "\n".join(line.strip() for line in old_lines) + "\n"
    haystack = "\n" + "\n".join(line.strip() for line in lines) + "\n"
    found = haystack.find(wanted)
    if found < 0:
        # (one line: the reference server puts oldText on a line of its own)
        raise FileSystemError(
            f"Could not find exact match for edit: oldText {quote(old)!r} is not in the file, "
            "nor a run of lines equal to it apart from indentation; read the file and copy "
            "oldText from it"
        )
    i = haystack.count("\n", 0, found)  # the line the match starts on
    base = _indent(lines[i])
    new_lines = new.strip("\n").split("\n")
    first = _indent(new_lines[0])
    fitted = []
    for line in new_lines:
        if not line.strip():
            fitted.append("")
            continue
        own = _indent(line)
        extra = own[len(first) :] if own.startswith(first) else ""
        fitted.append(base + extra + line.lstrip())
    lines[i : i + len(old_lines)] = fitted
    return "\n".join(lines)


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def unified_diff(before: str, after: str, path: str) -> str:
    """A git-style unified diff in a Markdown ``diff`` fence (fence longer than any backtick run)."""
    lines = list(
        unified_lines(
            before.splitlines(keepends=True),
            after.splitlines(keepends=True),
            path,
            path,
            "original",
            "modified",
        )
    )
    body = "".join(
        line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines
    )
    fence = "```"
    while fence in body:
        fence += "`"
    return f"{fence}diff\n{body}{fence}\n\n"
