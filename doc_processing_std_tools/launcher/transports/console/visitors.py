"""Who is looking at the console, and whether a request may act for them.

Signing in takes the daemon's static token or a JWT through a form and keeps it in a cookie
(HttpOnly, SameSite=Strict, Secure over https, scoped to ``/ui``): the same verifiers as ``/mcp``
check it on every request, so a revoked or expired token signs the visitor out. The token never
appears in a URL or a page. Every POST must come from the console itself: its ``Origin`` (or
``Sec-Fetch-Site``) must be this site's, and its form must carry the CSRF token derived from the
cookie (an HMAC under a secret made at start, so it changes with the cookie and the process).

Without auth configured, the console is served only to loopback clients; they get an anonymous
cookie that only ties the CSRF token to the browser.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
import time
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ...calls.audit import Caller
from ..identity import claims_of, subject_of

COOKIE = "dpt_console"
COOKIE_PATH = "/ui"
ANONYMOUS_PREFIX = "anonymous:"
SIGNED_IN_FOR = 12 * 3600  # seconds a static-token cookie lasts (a JWT's: until its exp)
SAME_SITE = {"same-origin", "none"}  # Sec-Fetch-Site values of a request the console made


@dataclass(frozen=True)
class Visitor:
    """A signed-in visitor: who (as the audit log names them), and the credential the console
    calls with (None without auth)."""

    user: str
    token: str | None
    cookie: str
    caller: Caller


class Visitors:
    """Signs visitors in and out, and checks each request (see the module's docstring)."""

    def __init__(self, verifier: Any) -> None:
        self.verifier = verifier  # IncomingAuth.verifier: None without auth
        self._secret = secrets.token_bytes(32)

    @property
    def needs_sign_in(self) -> bool:
        return self.verifier is not None

    async def visitor(self, request: Request) -> Visitor | None:
        """The visitor the request's cookie names, verified now; None when there is none."""
        cookie = request.cookies.get(COOKIE, "")
        if not cookie:
            return None
        if self.verifier is None:
            if not cookie.startswith(ANONYMOUS_PREFIX):
                return None
            return Visitor("anonymous", None, cookie, Caller("anonymous"))
        if cookie.startswith(ANONYMOUS_PREFIX):
            return None
        verified = await self.verifier.verify_token(cookie)
        if verified is None:
            return None
        name = subject_of(verified) or str(getattr(verified, "client_id", "") or "token")
        return Visitor(name, cookie, cookie, Caller(name, claims=claims_of(verified)))

    async def sign_in(self, token: str) -> tuple[str, int] | None:
        """The cookie value and lifetime for *token*, or None when the verifiers refuse it."""
        token = token.strip()
        if self.verifier is None or not token or token.startswith(ANONYMOUS_PREFIX):
            return None
        verified = await self.verifier.verify_token(token)
        if verified is None:
            return None
        expires = getattr(verified, "expires_at", None)
        lifetime = int(expires - time.time()) if expires else SIGNED_IN_FOR
        return token, max(1, min(lifetime, SIGNED_IN_FOR))

    def anonymous_cookie(self) -> str:
        return ANONYMOUS_PREFIX + secrets.token_urlsafe(18)

    def csrf(self, cookie: str) -> str:
        """The CSRF token of the pages shown to the holder of *cookie*."""
        return hmac.new(self._secret, cookie.encode(), hashlib.sha256).hexdigest()

    def csrf_ok(self, cookie: str, given: str) -> bool:
        return bool(cookie) and hmac.compare_digest(self.csrf(cookie), given)


def same_origin(request: Request) -> bool:
    """Whether a request was made by a page of this site (the Host guard vetted ``Host``).

    A browser sends ``Origin`` on every POST and ``Sec-Fetch-Site`` on every request; a request
    with neither (a script) still needs the CSRF token.
    """
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in SAME_SITE:
        return False
    origin = request.headers.get("origin")
    if origin is None:
        return True
    host = request.headers.get("host", "")
    return origin in (f"{request.url.scheme}://{host}", f"http://{host}", f"https://{host}")


def loopback_client(request: Request) -> bool:
    """Whether the request comes from this machine."""
    client = request.client
    if client is None:
        return False
    try:
        return ipaddress.ip_address(client.host.split("%")[0]).is_loopback
    except ValueError:
        return False


def set_cookie(response: Response, request: Request, value: str, max_age: int | None) -> None:
    response.set_cookie(
        COOKIE,
        value,
        max_age=max_age,
        path=COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def clear_cookie(response: Response, request: Request) -> None:
    response.delete_cookie(
        COOKIE,
        path=COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
