"""The JSON-RPC error replies for lines the stdio transport cannot serve.

The SDK drops such a line silently and its client waits forever; here every line
that is a request gets ``-32700`` (parse error) or ``-32600`` (invalid request),
with its ``id`` whenever it can be read, and a message without library URLs. Over HTTP, a
body that is JSON but not JSON-RPC gets the same -32600 text, with its readable id too
(``http.py``, ``seams/http_sessions.py``).
"""

from __future__ import annotations

import json
import re
from typing import Any

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
SURROGATE_HINT = (
    "a \\ud800-\\udfff escape without its pair is not valid Unicode; escape the character "
    "as a surrogate pair or send it as UTF-8"
)
BOM = b"\xef\xbb\xbf"
BOM_TEXT = "the line starts with a byte order mark (U+FEFF); send the JSON without one"
SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
INVALID_REQUEST_TEXT = (
    "Invalid request: not a JSON-RPC 2.0 message (a request needs "
    '"jsonrpc": "2.0", an "id" (string or integer), a "method" string and, optionally, '
    '"params" as an object)'
)


def error_reply(line: bytes, problem: Exception) -> bytes | None:
    """The JSON-RPC error line answering *line*, which failed validation with *problem*.

    None when the line is a (malformed) response from the client: responses get no reply.
    """
    try:
        message = json.loads(line)  # lenient: reads lone surrogates, to recover the id
    except UnicodeDecodeError:
        message = _readable(line.decode("utf-8", "replace"))
        code, text = PARSE_ERROR, "Parse error: the line is not valid UTF-8"
    except (ValueError, RecursionError):
        message = _first_value(line)
        code, text = PARSE_ERROR, f"Parse error: {_first_message(problem)}"
    else:
        if line.startswith(BOM):  # (json.loads skips it, JSON-RPC does not)
            code, text = PARSE_ERROR, f"Parse error: {BOM_TEXT}"
        elif _json_invalid(problem):
            hint = SURROGATE_HINT if SURROGATE_ESCAPE.search(line) else _first_message(problem)
            code, text = PARSE_ERROR, f"Parse error: {hint}"
        else:
            code, text = INVALID_REQUEST, INVALID_REQUEST_TEXT
    if (
        isinstance(message, dict)
        and "method" not in message
        and ("result" in message or "error" in message)
    ):
        return None
    return encode_error(readable_id(message), code, text)


def readable_id(message: Any) -> int | str | None:
    """*message*'s id when it has one a reply can carry (a string, or an integer that is not
    a bool), else None: JSON-RPC 2.0's null id, for an id that cannot be determined."""
    candidate = message.get("id") if isinstance(message, dict) else None
    if isinstance(candidate, str) or (
        isinstance(candidate, int) and not isinstance(candidate, bool)
    ):
        return candidate
    return None


def invalid_request(message: Any) -> bytes:
    """The -32600 answering *message*, JSON that is not a JSON-RPC message (as over stdio)."""
    return encode_error(readable_id(message), INVALID_REQUEST, INVALID_REQUEST_TEXT)


def _first_value(line: bytes) -> Any:
    """The first JSON value on *line* when there is one (to read the id of a line with
    something after it), else None."""
    try:
        return json.JSONDecoder().raw_decode(line.decode("utf-8", "replace"))[0]
    except (ValueError, RecursionError):
        return None


def _readable(text: str) -> Any:
    """*text* as JSON when it is (to read the id of a line that was not UTF-8), else None."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


BOOLEAN_TOKEN_TEXT = (
    "Invalid params: _meta.progressToken must be a string or an integer, not true or false"
)


def boolean_progress_token(params: Any) -> bool:
    """Whether *params* carry a ``true``/``false`` progressToken: pydantic reads it as 1 or
    0 (a bool is an int), where MCP allows only a string or an integer."""
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and isinstance(meta.get("progressToken"), bool)


def encode_error(request_id: int | str | None, code: int, text: str) -> bytes:
    reply = {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": text}}
    text = json.dumps(reply, ensure_ascii=False, separators=(",", ":"))
    return text.encode("utf-8", "replace") + b"\n"


def _json_invalid(problem: Exception) -> bool:
    errors = getattr(problem, "errors", None)
    try:
        return bool(errors) and errors()[0]["type"] == "json_invalid"  # type: ignore[misc]
    except Exception:
        return False


def _first_message(problem: Exception) -> str:
    """pydantic's first message (e.g. "Invalid JSON: expected value at line 1 column 1"),
    without its documentation URL or the input."""
    errors = getattr(problem, "errors", None)
    try:
        return str(errors(include_url=False)[0]["msg"])[:300]  # type: ignore[misc]
    except Exception:
        return "the line is not valid JSON"
