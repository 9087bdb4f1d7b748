"""Argument errors a model can act on: one sentence, no library URLs, no echo of huge input.

fastmcp validates a tool's arguments with pydantic before the tool runs and, on a
bad call, sends pydantic's own text: several lines per field, each ending in
``For further information visit https://errors.pydantic.dev/...``.
:func:`check_arguments` makes every function tool of a server answer instead
with :func:`describe_invalid_arguments`, e.g. ``Invalid arguments for
memory_insert: insert_line must be an integer (got the string 'x').``

:func:`refused` makes the ``ToolError`` for a call the tool turns down because of
its input (a missing key, a path outside the roots): an ordinary answer, logged
at DEBUG, not as a failure.

It works on the tool objects themselves (not as middleware), so the servers
behave the same alone and mounted in ``dpt-launch``, where plain servers'
tools are copied into the launcher without their server's middleware.
"""

from __future__ import annotations

import logging
import reprlib
from typing import TYPE_CHECKING, Any

from .client_text import quote

if TYPE_CHECKING:
    from fastmcp.exceptions import ToolError
    from pydantic import ValidationError

MAX_LISTED = 3  # problems named in one message
VALUE_LIMIT = 80  # characters of a bad value repeated in the message

_PLURALS = {"string": "strings", "integer": "integers", "number": "numbers", "boolean": "booleans"}
_JSON_TYPES = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "array": "a list",
    "object": "an object",
    "null": "null",
}


def _where(loc: tuple[int | str, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "the arguments"


def _schema_at(schema: dict[str, Any], loc: tuple[int | str, ...]) -> dict[str, Any]:
    """The JSON schema of the argument at *loc* (best effort; {} when unknown)."""
    defs = schema.get("$defs", {})
    node: Any = schema
    for part in loc:
        if not isinstance(node, dict):
            return {}
        ref = node.get("$ref", "")
        if ref.startswith("#/$defs/"):
            node = defs.get(ref.removeprefix("#/$defs/"), {})
        if isinstance(part, int):
            node = node.get("items", {})
        else:
            node = node.get("properties", {}).get(part, {})
    if isinstance(node, dict) and str(node.get("$ref", "")).startswith("#/$defs/"):
        node = defs.get(node["$ref"].removeprefix("#/$defs/"), {})
    return node if isinstance(node, dict) else {}


def expected(schema: dict[str, Any], defs: dict[str, Any] | None = None) -> str:
    """What a JSON schema accepts, in words: 'a string', 'a list of strings', 'one of ...'."""
    defs = defs or {}
    ref = schema.get("$ref", "")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        schema = defs.get(ref.removeprefix("#/$defs/"), {})
    if "enum" in schema:
        return "one of " + ", ".join(repr(v) for v in schema["enum"])
    if "const" in schema:
        return repr(schema["const"])
    options = schema.get("anyOf") or schema.get("oneOf")
    if options:
        words = [expected(option, defs) for option in options]
        return " or ".join(dict.fromkeys(w for w in words if w))
    kind = schema.get("type")
    if kind == "array":
        items = schema.get("items", {})
        ref = items.get("$ref", "")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            items = defs.get(ref.removeprefix("#/$defs/"), {})
        if items.get("type") == "object" and items.get("properties"):
            return "a list of {" + ", ".join(items["properties"]) + "} objects"
        plural = _PLURALS.get(items.get("type", ""))
        return f"a list of {plural}" if plural else "a list"
    if kind == "object" and schema.get("properties"):
        return "an object with " + ", ".join(schema["properties"])
    if isinstance(kind, str):
        return _JSON_TYPES.get(kind, kind)
    return ""


_REPR = reprlib.Repr()  # keyword arguments need Python 3.12
_REPR.maxlevel, _REPR.maxlist, _REPR.maxdict = 2, 5, 5
_REPR.maxstring = _REPR.maxother = VALUE_LIMIT
_KINDS = {
    str: "the string",
    bool: "the boolean",
    int: "the integer",
    float: "the number",
    list: "the list",
    dict: "the object",
}


def _got(value: Any) -> str:
    """What came, briefly (reprlib cuts long strings and lists)."""
    if value is None:
        return "got null"
    return f"got {_KINDS.get(type(value), 'the value')} {_REPR.repr(value)}"


def describe_invalid_arguments(
    tool: str, error: ValidationError, schema: dict[str, Any] | None = None
) -> str:
    """One sentence naming each bad argument, what it must be, and (briefly) what came."""
    schema = schema or {}
    problems = []
    details = error.errors(include_url=False, include_context=False)
    for detail in details[:MAX_LISTED]:
        loc = tuple(detail.get("loc", ()))
        where = _where(loc)
        wanted = expected(_schema_at(schema, loc), schema.get("$defs"))
        kind = detail.get("type", "")
        if kind in ("missing", "missing_argument"):
            problems.append(f"{where} is required" + (f" ({wanted})" if wanted else ""))
        elif kind in ("unexpected_keyword_argument", "extra_forbidden"):
            problems.append(f"{where} is not a parameter of this tool")
        else:
            message = str(detail.get("msg", "is not valid"))
            message = message.removeprefix("Input ").removeprefix("Value error, ")
            message = message.replace("should be", "must be", 1)
            if wanted and kind.endswith(("_type", "_parsing")):
                message = f"must be {wanted}"
            problems.append(f"{where} {quote(message, 200)} ({_got(detail.get('input'))})")
    more = len(details) - MAX_LISTED
    tail = f", and {more} more problem{'s' if more > 1 else ''}" if more > 0 else ""
    return f"Invalid arguments for {tool}: " + "; ".join(problems) + tail + "."


def refused(message: str) -> ToolError:
    """The error for a call refused because of its input: the client sees *message*
    (``isError``); the log has at most one DEBUG line (fastmcp logs a ``ToolError``
    at its ``log_level``)."""
    # (here, not at the top: the servers import this module, and must not load fastmcp, 0.25 s)
    from fastmcp.exceptions import ToolError

    return ToolError(message, log_level=logging.DEBUG)
