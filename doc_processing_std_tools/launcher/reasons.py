"""The one-line reason an exception's chain gives, for messages about servers that cannot be reached."""

from __future__ import annotations

import errno
import os


def error_reason(exc: BaseException) -> str:
    """The most specific reason in *exc*'s chain: an OS error's text (``connection refused``,
    ``name or service not known``), else the first line of the error's own text.

    A known errno speaks for itself: asyncio's refused connect carries ECONNREFUSED with the
    text ``Connect call failed ('127.0.0.1', 1)``. A resolver's error (negative, no errno name)
    keeps its own text, which is the only one that says what went wrong."""
    seen: BaseException | None = exc
    for _ in range(10):
        if seen is None:
            break
        if isinstance(seen, OSError) and (seen.errno or seen.strerror):
            number = seen.errno or 0
            known = number in errno.errorcode
            text = os.strerror(number) if known else seen.strerror or os.strerror(number)
            return text[0].lower() + text[1:]
        seen = seen.__cause__ or seen.__context__
    lines = str(exc).strip().splitlines()
    return lines[0][:300] if lines else type(exc).__name__
