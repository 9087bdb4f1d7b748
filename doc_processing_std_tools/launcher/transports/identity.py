"""Who is calling: the verified subject of the caller's token, for per-user state upstream.

The HTTP transport's auth layer (:class:`CallerIdentity`) sets it for every request;
code serving a call reads it with :func:`current_subject`. A JWT caller
(``transport.auth.jwt``) is its token's ``sub`` claim. Static-token callers
(``transport.auth.token``), stdio and unauthenticated HTTP have no subject (None):
they act as the daemon's own, shared identity, the one ``dpt-launch login NAME``
(without ``--user``) signs in.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from contextvars import ContextVar
from typing import Any

from fastmcp.server.dependencies import get_access_token

from ..calls.audit import Caller

# (the ASGI shapes, as in .asgi; not imported from there, which imports this module)
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f]")
_subject: ContextVar[str | None] = ContextVar("dpt_caller_subject", default=None)
_caller: ContextVar[str | None] = ContextVar("dpt_caller_name", default=None)
_token: ContextVar[Any] = ContextVar("dpt_caller_token", default=None)
_stdio_client: list[str | None] = [None]  # (one stdio client per process: its initialize)


def current_subject() -> str | None:
    """The subject of the caller being served, or None for the daemon's shared identity.

    Read from the MCP request being handled when there is one (an HTTP session is
    bound to the credential that opened it, and each message carries its own
    request), else from the value :class:`CallerIdentity` set for this request.
    Meaningful while serving a call: a task started during a request inherits that
    request's context, so long-lived background work must not take its answer as
    the identity of later calls.
    """
    try:
        token = get_access_token()
    except RuntimeError:
        token = None
    if token is not None:
        return subject_of(token)
    return _subject.get()


def current_caller() -> str | None:
    """Who is calling over HTTP, by name, for the audit log and rate limits: the token's
    subject, else the static token's name (``token-2`` for the second); None without a token.
    Never the token itself."""
    from fastmcp.server.dependencies import get_access_token

    try:
        token = get_access_token()
    except RuntimeError:
        token = None
    if token is not None:
        return subject_of(token) or _clean(getattr(token, "client_id", None))
    return _caller.get()


def current_claims() -> dict[str, Any] | None:
    """The verified claims of the caller being served over HTTP, for ``access:`` rules: a JWT's
    claims, ``{}`` for a static token, None without a token (nothing verified)."""
    try:
        token = get_access_token()
    except RuntimeError:
        token = None
    if token is None:
        token = _token.get()
    return claims_of(token) if token is not None else None


def claims_of(access_token: Any) -> dict[str, Any]:
    """A verified token's claims (``{}`` for a static token)."""
    claims = getattr(access_token, "claims", None)
    return dict(claims) if isinstance(claims, dict) else {}


def scope_token(scope: Scope) -> Any:
    """The verified access token of an authenticated ASGI request, or None."""
    return getattr(scope.get("user"), "access_token", None)


def scope_caller(scope: Scope) -> Caller:
    """Who sent an HTTP request, for ``access:`` rules: named as :func:`caller_name` does
    (``anonymous`` without a token), with the token's verified claims (None without one)."""
    token = scope_token(scope)
    claims = claims_of(token) if token is not None else None
    return Caller(caller_name(scope) or "anonymous", claims=claims)


def note_stdio_client(params: Any) -> None:
    """The stdio client's ``initialize`` params: its ``clientInfo.name`` names it in the audit
    log (the fast path serves calls before the SDK's session has been seen)."""
    info = params.get("clientInfo") if isinstance(params, dict) else None
    name = info.get("name") if isinstance(info, dict) else None
    _stdio_client[0] = _clean(name)


def stdio_client() -> str | None:
    """The stdio client's name from its ``initialize``, or None."""
    return _stdio_client[0]


def _clean(name: Any) -> str | None:
    return _UNPRINTABLE.sub("?", name)[:200] if isinstance(name, str) and name else None


def subject_of(access_token: Any) -> str | None:
    """The subject a verified access token names; None for a static token (no subject)."""
    subject = getattr(access_token, "subject", None)
    return subject if isinstance(subject, str) and subject else None


def caller_name(scope: Scope) -> str | None:
    """Who sent an authenticated request, for the access log: the subject, else the
    verifier's client id (``token-2`` for the second static token); never the token."""
    token = getattr(scope.get("user"), "access_token", None)
    if token is None:
        return None
    name = subject_of(token) or getattr(token, "client_id", None)
    return _UNPRINTABLE.sub("?", str(name))[:200] if name else None


@contextlib.contextmanager
def acting_as(subject: str | None) -> Iterator[None]:
    """Serve the enclosed code as *subject* (the auth layer per request; tests; CLI verbs)."""
    reset = _subject.set(subject)
    try:
        yield
    finally:
        _subject.reset(reset)


class CallerIdentity:
    """ASGI middleware: the rest of the request runs as the subject its verified token names.

    Stacked after the authentication middleware, which puts the verified user in
    ``scope["user"]`` (the mcp SDK's ``AuthenticatedUser``; anything else is no subject).
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        token = scope_token(scope)
        reset = _caller.set(caller_name(scope))
        reset_token = _token.set(token)
        try:
            with acting_as(subject_of(token) if token is not None else None):
                await self.app(scope, receive, send)
        finally:
            _token.reset(reset_token)
            _caller.reset(reset)
