"""How much one reply of a tool that lists or searches may hold, and the note that says the rest.

A reply goes whole into the agent's context: 100,000 memories matching a search were 5.5 MB.
Every such tool stops at :data:`DEFAULT_MAX_REPLY_ENTRIES` entries or
:data:`DEFAULT_MAX_REPLY_CHARS` characters, whichever comes first, and ends with a note saying
how many more there are and how to page or narrow. The defaults: Claude Code refuses an MCP
result over 25,000 tokens unless told otherwise (``MAX_MCP_OUTPUT_TOKENS``); 64,000 characters
is about 16,000 tokens of English, JSON or paths (about 4 characters a token), so a capped reply
passes with room to spare, and 500 entries are more than an agent reads before it narrows.
Each server's ``Settings`` carries both (:class:`ReplyLimits`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from pydantic import Field

from ..settings import ServerSettings

DEFAULT_MAX_REPLY_ENTRIES = 500
DEFAULT_MAX_REPLY_CHARS = 64_000
MIN_REPLY_CHARS = 2_000  # a note and a few entries
NOTE_ROOM = 600  # characters kept for the note (and a JSON reply's wrapper)


class ReplyBounds(NamedTuple):
    """The caps of one reply: entries, and characters of the whole text."""

    entries: int = DEFAULT_MAX_REPLY_ENTRIES
    chars: int = DEFAULT_MAX_REPLY_CHARS

    def take(self, texts: Iterable[str], used: int = 0, separator: int = 1) -> list[str]:
        """The leading *texts* that fit in a reply already holding *used* characters, joined by
        *separator* characters, room kept for the note (*texts* is read lazily: one past
        the last one taken)."""
        budget = self.chars - NOTE_ROOM - used
        taken: list[str] = []
        for text in texts:
            if len(taken) >= self.entries:
                break
            budget -= len(text) + (separator if taken else 0)
            if budget < 0:
                break
            taken.append(text)
        return taken

    def stops_at(self) -> str:
        """The caps, for a note."""
        return (
            f"a reply stops at {self.entries:,} entries or {self.chars:,} characters "
            "(max_reply_entries, max_reply_chars)"
        )

    def note(self, more: int, what: str, how: str, at_least: bool = False) -> str:
        """``[N more WHAT not shown: <caps>; HOW]``: the last line of a cut text reply."""
        count = f"at least {more:,}" if at_least else f"{more:,}"
        return f"[{count} more {what} not shown: {self.stops_at()}; {how}]"


DEFAULT_BOUNDS = ReplyBounds()


class ReplyLimits(ServerSettings):
    """The two settings of :class:`ReplyBounds`, for servers whose tools list or search."""

    max_reply_entries: int = Field(
        DEFAULT_MAX_REPLY_ENTRIES,
        ge=1,
        description="The most entries one reply of a listing or search holds; the reply says "
        "how many more there are and how to page or narrow.",
    )
    max_reply_chars: int = Field(
        DEFAULT_MAX_REPLY_CHARS,
        ge=MIN_REPLY_CHARS,
        description="The most characters one reply of a listing or search holds (about 4 a "
        "token); the reply says how many more entries there are.",
    )

    @property
    def reply_bounds(self) -> ReplyBounds:
        return ReplyBounds(self.max_reply_entries, self.max_reply_chars)
