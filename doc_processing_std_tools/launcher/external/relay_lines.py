"""The JSON lines of a call on the fast path: the request to an external child, and the
reply to the client (spliced from the child's line when it can be, else re-encoded)."""

from __future__ import annotations

import json
from collections.abc import Callable
from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any

from fastmcp.exceptions import ToolError
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

from ...exceptions import DptError
from .child_pipe import (
    CONNECTION_META_MARK,
    CONNECTION_META_PREFIX,
    JSON_SPACE,
    LAUNCHER_ERROR_DATA,
    RESULT_HEAD,
    RESULT_ID_HEAD,
    SURROGATE_ESCAPE,
)
from .result_links import URI_KEY, exposed_links


class ErrorReply(DptError, ToolError):
    """The server answered a call with a JSON-RPC error: the client gets that error as it is
    (its code, message and data), as from a direct connection, never an ``isError`` text.
    (A ``ToolError``: the call's policy counts it as the tool's own error.)"""

    def __init__(self, tool: str, error: dict[str, Any]) -> None:
        super().__init__(f"Error calling tool {tool!r}: {error.get('message')}"[:1000])
        self.error = error


# the protocol eras: a handshake (initialize) opens a session; 2026-era requests stand alone
HANDSHAKE_ERA = frozenset(HANDSHAKE_PROTOCOL_VERSIONS)
MODERN_ERA = frozenset(MODERN_PROTOCOL_VERSIONS)
MAX_ERROR_MESSAGE = 1000  # characters of a server's error message passed on
MAX_ERROR_DATA = 4096  # bytes of its ``data`` (as compact JSON) passed on; more is left out


def server_error(message: Any) -> dict[str, Any] | None:
    """The JSON-RPC error of a reply *message* when the server wrote it (a code and a message;
    not one the launcher wrote in its place), bounded, else None. A server may put a stack
    trace or a whole echoed argument in its error: the client gets at most
    :data:`MAX_ERROR_MESSAGE` characters of the message and :data:`MAX_ERROR_DATA` bytes of data."""
    error = message.get("error") if isinstance(message, dict) else None
    if (
        not isinstance(error, dict)
        or type(error.get("code")) is not int
        or not isinstance(error.get("message"), str)
        or error.get("data") == LAUNCHER_ERROR_DATA
    ):
        return None
    text: str = error["message"]
    if len(text) > MAX_ERROR_MESSAGE:
        error = {**error, "message": text[: MAX_ERROR_MESSAGE - 1] + "\u2026"}
    if "data" in error:
        try:
            size = len(json.dumps(error["data"], separators=(",", ":"), ensure_ascii=False))
        except (TypeError, ValueError, RecursionError):
            size = MAX_ERROR_DATA + 1
        if size > MAX_ERROR_DATA:
            error = {k: v for k, v in error.items() if k != "data"}
            error["message"] += f" (its data, {size:,} bytes, left out)"
    return error


def _unencodable(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# Compact ASCII JSON from the C encoder that JSONEncoder.encode drives, called directly: that
# method and iterencode are two Python frames per relayed call. (No cycle check: what is
# encoded here was parsed from JSON.)
_ENCODE: Callable[[Any, int], list[str]] = (
    c_make_encoder(None, _unencodable, encode_basestring_ascii, None, ":", ",", False, False, True)
    if c_make_encoder is not None
    else lambda value, _level: [json.dumps(value, separators=(",", ":"))]
)


def child_request(name: str, key: str, params: dict[str, Any], progress: bool = False) -> bytes:
    """The ``tools/call`` line for the child: its own tool *name*, our id *key*, the client's
    arguments and _meta (its progressToken replaced by *key* when *progress*, else dropped)."""
    meta = params.get("_meta")
    sent: dict[str, Any] = {"name": name, "arguments": params.get("arguments") or {}}
    if meta or progress:
        kept = {k: v for k, v in meta.items() if k != "progressToken"} if meta else {}
        if progress:
            kept["progressToken"] = key
        if kept:
            sent["_meta"] = kept
    request = {"jsonrpc": "2.0", "id": key, "method": "tools/call", "params": sent}
    return "".join(_ENCODE(request, 0)).encode() + b"\n"


def encode_line(message: dict[str, Any]) -> bytes:
    """*message* as one line of compact JSON (text that is not valid Unicode: an error result)."""
    try:
        text = json.dumps(message, ensure_ascii=False, separators=(",", ":"))
        return text.encode("utf-8") + b"\n"
    except (ValueError, UnicodeEncodeError):
        return error_result(
            message["id"], "the result holds text that is not valid Unicode and cannot be sent"
        )


def client_reply(
    line: bytes,
    parsed: Any,
    key: str,
    request_id: int | str,
    tool: str,
    namespace: str | None = None,
) -> bytes:
    """The child's reply *line* to call *key* (one of ours: ``dpt~N``, nothing to escape), as
    the reply to the client's *request_id*; its resource links under *namespace*."""
    line = line.removesuffix(b"\r")
    head = b'{"jsonrpc":"2.0","id":"' + key.encode() + b'","result":{'
    # (Node's servers write the result first: the same line, keys in their order of creation)
    tail = RESULT_ID_HEAD + key.encode() + b'"}'
    first = line.startswith(head)
    if (
        parsed is None
        and (first or (line.startswith(RESULT_HEAD) and line.endswith(tail)))
        and (namespace is None or (line.find(URI_KEY) < 0 and line.find(b"\\u") < 0))
        # (_clean's answer for the usual reply, without the call; find, not "in": see take)
        and (
            (line.isascii() and b"\\u" not in line and CONNECTION_META_MARK not in line)
            or _clean(line)
        )
        and _one_json_value(line)
    ):
        client_id = (
            str(request_id) if isinstance(request_id, int) else json.dumps(request_id)
        ).encode()
        if first:
            return (
                b'{"jsonrpc":"2.0","id":' + client_id + b',"result":{' + line[len(head) :] + b"\n"
            )
        return line[: -len(tail)] + b'},"jsonrpc":"2.0","id":' + client_id + b"}\n"
    try:
        message = parsed if parsed is not None else json.loads(line)
    except (ValueError, RecursionError) as exc:  # not UTF-8, or not JSON
        raise ToolError(
            f"Error calling tool {tool!r}: the server's reply is not valid JSON"
        ) from exc
    result = message.get("result") if isinstance(message, dict) else None
    if not isinstance(result, dict):
        if (passed := server_error(message)) is not None:
            raise ErrorReply(tool, passed)
        error = message.get("error") if isinstance(message, dict) else None
        text = error.get("message") if isinstance(error, dict) else None
        raise ToolError(
            f"Error calling tool {tool!r}: {text or 'the server sent no result'}"[:1000]
        )
    result = exposed_links(result, namespace)
    meta = result.get("_meta")
    if isinstance(meta, dict):
        result["_meta"] = {
            k: v for k, v in meta.items() if not str(k).startswith(CONNECTION_META_PREFIX)
        }
    try:
        text = json.dumps(
            {"jsonrpc": "2.0", "id": request_id, "result": result},
            ensure_ascii=False,
            allow_nan=False,
        )
        return text.encode("utf-8") + b"\n"
    except (ValueError, UnicodeEncodeError) as exc:
        raise ToolError(
            f"Error calling tool {tool!r}: the server's reply holds text that is not valid Unicode "
            "or a number JSON cannot carry"
        ) from exc


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# strict (no control characters inside strings) and refusing NaN and Infinity. (Calling json's
# C scanner directly instead saved 0.5 us of a 4 KB reply, 0.4% of the launcher's CPU per
# relayed call: not worth a private-looking call.)
_STRICT_DECODER = json.JSONDecoder(parse_constant=_not_json)


def _one_json_value(line: bytes) -> bool:
    """Whether *line* is exactly one valid JSON value (RFC 8259): a child's line is spliced
    into the client's reply only then. Two values on a line, a raw control character in a
    string or a NaN would otherwise reach the client as they are."""
    try:
        text = line.decode()
        _, end = _STRICT_DECODER.raw_decode(text)
    except (ValueError, RecursionError):
        return False
    return end == len(text) or not text[end:].strip(JSON_SPACE)


def _clean(line: bytes) -> bool:
    """Whether *line* can go to the client as it is: valid UTF-8, no lone surrogates, no envelope."""
    if CONNECTION_META_MARK in line or (b"\\u" in line and SURROGATE_ESCAPE.search(line)):
        return False
    if line.isascii():
        return True
    try:
        line.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def error_reply(request_id: int | str, error: dict[str, Any]) -> bytes:
    """The JSON-RPC error reply to the client's *request_id*: the server's *error* as it is."""
    reply = {"jsonrpc": "2.0", "id": request_id, "error": error}
    return (
        json.dumps(reply, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "replace")
        + b"\n"
    )


def error_result(request_id: int | str, text: str) -> bytes:
    reply = {
        "jsonrpc": "2.0",
        "id": request_id,
        "result": {"content": [{"type": "text", "text": text}], "isError": True},
    }
    text = json.dumps(reply, ensure_ascii=False, separators=(",", ":"))
    return text.encode("utf-8", "replace") + b"\n"
