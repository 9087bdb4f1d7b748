"""Text that can always be sent to a client.

A file name that is not UTF-8 (``os.listdir`` gives it back with surrogate escapes)
or a JSON file holding an escaped lone surrogate yields a Python string that cannot
be encoded as UTF-8. One such string in a reply makes the whole JSON-RPC message
unserializable, and over stdio that stops the process. Tool results and error
messages pass through :func:`sendable` first.
"""

from __future__ import annotations


def sendable(text: str) -> str:
    """*text*, with what UTF-8 cannot encode shown as backslash escapes.

    Bytes of a non-UTF-8 file name come out as ``\\xff``; other lone surrogates as
    ``\\ud800``. Valid text is returned unchanged (and cheaply: ASCII is checked first).
    """
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


QUOTE_LIMIT = 1024  # characters of any one argument an error message may repeat
MESSAGE_LIMIT = 4096  # characters of any error message


def quote(value: object, limit: int = QUOTE_LIMIT) -> str:
    """*value* as text for a message, cut to *limit* characters with an ellipsis and its length.

    Errors repeat what the caller sent so they can be acted on, but a 2 MB argument
    must not come back as a 2 MB error.
    """
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text):,} characters)"


def bounded(message: str, limit: int = MESSAGE_LIMIT) -> str:
    """A whole error message cut to *limit* characters (the last guard before sending)."""
    if len(message) <= limit:
        return message
    return f"{message[:limit]}… (message cut at {limit:,} of {len(message):,} characters)"
