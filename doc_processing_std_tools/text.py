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
