"""Who may call the HTTP daemon: static bearer tokens and the team's identity-provider JWTs.

The pieces come from the libraries: fastmcp's ``JWTVerifier`` checks a JWT (signature
with keys from the provider's JWKS, refetched, rate-limited, when a token names a key
it has not seen; issuer, audience, expiry, scopes), fastmcp's ``RequireAuthMiddleware``
answers 401, and the mcp SDK's ``ProtectedResourceMetadata`` is the RFC 9728 document
that tells MCP clients where to sign in. Written here: trying the static tokens first
(in constant time), refusing JWTs without ``sub`` or ``exp``, and the resource URL taken
from each request when ``transport.auth.jwt.resource`` is unset (a client reaches the
daemon by the name it uses, which the Host guard has already vetted).
"""

from __future__ import annotations

import hmac
import json
import logging
import re
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx2
from fastmcp.server.auth import AccessToken, TokenVerifier
from fastmcp.server.auth.middleware import RequireAuthMiddleware
from mcp.server.auth.json_response import PydanticJSONResponse
from mcp.server.auth.routes import build_resource_metadata_url, cors_middleware
from mcp.shared.auth import ProtectedResourceMetadata
from pydantic import AnyHttpUrl
from starlette.middleware import Middleware
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from .asgi import ASGIApp, Message, Receive, Scope, Send
from .identity import CallerIdentity

if TYPE_CHECKING:
    from ..config.transport import JwtAuthConfig, TransportConfig

log = logging.getLogger("dpt-launch.auth")

METADATA_PATH = "/.well-known/oauth-protected-resource"
# fastmcp's loggers that say why a token was refused ("issuer mismatch (got …, expected …)")
REFUSAL_LOGGERS = ("fastmcp.server.auth.providers.jwt", "fastmcp.server.auth.middleware")
_HOST = re.compile(r"^[A-Za-z0-9.\-]+(:\d{1,5})?$|^\[[0-9A-Fa-f:.]+\](:\d{1,5})?$")


class IncomingAuth:
    """What the HTTP app needs to authenticate callers, built from ``transport.auth``."""

    def __init__(self, transport: TransportConfig, resource_name: str) -> None:
        self.jwt = transport.jwt
        self.path = transport.path
        self.resource_name = resource_name
        static = static_bearer_tokens(transport.tokens) if transport.tokens else None
        by_jwt = jwt_verifier(self.jwt) if self.jwt else None
        self.verifier = caller_tokens(static, by_jwt) if static or by_jwt else None
        if by_jwt is not None:
            one_line_refusals()

    def middleware(self) -> list[Any]:
        """Authentication for every request (the protected routes then require it)."""
        if self.verifier is None:
            return []
        return [*self.verifier.get_middleware(), Middleware(CallerIdentity)]

    def protected(self, endpoint: ASGIApp) -> ASGIApp:
        """*endpoint* behind a 401 for callers without a valid token."""
        if self.verifier is None:
            return endpoint
        scopes = self.jwt.required_scopes if self.jwt else []
        guarded = SayMissingToken(
            RequireAuthMiddleware(endpoint, required_scopes=[], challenge_scopes=scopes)
        )
        return PointToMetadata(guarded, self.metadata_url) if self.jwt else guarded

    def routes(self) -> list[Any]:
        """The protected-resource metadata (RFC 9728), at the root and path-suffixed forms."""
        if self.jwt is None:
            return []
        paths = {METADATA_PATH, METADATA_PATH + self.path.rstrip("/")}
        if self.jwt.resource:
            published = build_resource_metadata_url(AnyHttpUrl(self.jwt.resource))
            paths.add(urlsplit(str(published)).path)
        endpoint = cors_middleware(self._metadata, ["GET", "OPTIONS"])
        return [Route(path, endpoint, methods=["GET", "OPTIONS"]) for path in sorted(paths)]

    def resource_url(self, scope: Scope) -> str | None:
        """The MCP endpoint's URL as the client reaches it (None for an unusable Host header)."""
        if self.jwt is not None and self.jwt.resource:
            return self.jwt.resource
        host = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), "")
        if not _HOST.match(host):
            return None
        return f"{scope.get('scheme', 'http')}://{host}{self.path}"

    def metadata_url(self, scope: Scope) -> str | None:
        """Where the metadata for :meth:`resource_url` is published (RFC 9728 section 3.1)."""
        resource = self.resource_url(scope)
        return str(build_resource_metadata_url(AnyHttpUrl(resource))) if resource else None

    async def _metadata(self, request: Any) -> Any:
        assert self.jwt is not None  # the route exists only then
        resource = self.resource_url(request.scope)
        if resource is None:
            return PlainTextResponse("Bad Request: unusable Host header", status_code=400)
        # Strings, not AnyHttpUrl: the model keeps "https://idp.example" as written, and
        # clients compare the issuer as a string.
        document = ProtectedResourceMetadata.model_validate(
            {
                "resource": resource,
                "authorization_servers": [self.jwt.issuer],
                "scopes_supported": self.jwt.required_scopes or None,
                "resource_name": self.resource_name,
            }
        )
        return PydanticJSONResponse(document, headers={"Cache-Control": "public, max-age=3600"})


MISSING_TOKEN_TEXT = (
    "no bearer token: send 'Authorization: Bearer <token>' (a token of transport.auth, "
    "or the identity provider's JWT)"
)


MISSING_TOKEN_BODY = json.dumps({"error_description": MISSING_TOKEN_TEXT}).encode()


class SayMissingToken:
    """fastmcp's 401 for a request without a bearer token (an empty body, and a
    ``WWW-Authenticate`` without an ``error`` attribute: RFC 6750 section 3.1), with a one-line
    JSON body saying what is missing; its other answers (an invalid token's 401 says why
    already) as they are. Read from the ASGI messages fastmcp sends, none of its internals."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        saying = False

        async def saying_send(message: Message) -> None:
            nonlocal saying
            if message["type"] == "http.response.start" and message["status"] == 401:
                headers = message.get("headers", [])
                if (b"content-length", b"0") in headers:
                    saying = True
                    message["headers"] = [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(MISSING_TOKEN_BODY)).encode()),
                        *(
                            (n, v)
                            for n, v in headers
                            if n not in (b"content-length", b"content-type")
                        ),
                    ]
            elif message["type"] == "http.response.body" and saying:
                message = {"type": "http.response.body", "body": MISSING_TOKEN_BODY}
            await send(message)

        await self.app(scope, receive, saying_send)


class PointToMetadata:
    """Adds ``resource_metadata="…"`` to a 401's ``WWW-Authenticate``, for the URL of this request.

    (fastmcp's middleware takes one fixed URL; the daemon's depends on the name it is reached by.)
    """

    def __init__(self, app: ASGIApp, metadata_url: Any) -> None:
        self.app = app
        self.metadata_url = metadata_url

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def pointing_send(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 401:
                url = self.metadata_url(scope)
                if url:
                    message["headers"] = [
                        (name, _with_metadata(value, url) if name == b"www-authenticate" else value)
                        for name, value in message.get("headers", [])
                    ]
            await send(message)

        await self.app(scope, receive, pointing_send)


def _with_metadata(challenge: bytes, url: str) -> bytes:
    parameter = f'resource_metadata="{url}"'.encode()
    if challenge.strip().lower() == b"bearer":
        return b"Bearer " + parameter
    return challenge + b", " + parameter


class _OneLineRefusals(logging.Filter):
    """fastmcp's reasons for refusing a token, as one plain line on ``dpt-launch.auth``
    (its own records are rich, several lines, and outside ``log_format: json``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = " ".join(record.getMessage().split())[:1000]
        if not text.startswith("Auth error returned"):  # the access log has the 401 already
            log.log(record.levelno, "%s", text)
        return False


def one_line_refusals() -> None:
    """Install :class:`_OneLineRefusals` (idempotent)."""
    for name in REFUSAL_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _OneLineRefusals) for f in logger.filters):
            logger.addFilter(_OneLineRefusals())


def static_bearer_tokens(tokens: list[str]) -> TokenVerifier:
    """A fastmcp ``TokenVerifier`` for fixed tokens, compared in constant time.

    (fastmcp's ``StaticTokenVerifier`` looks tokens up in a dict: not constant-time.)
    """
    return StaticBearerTokens(tokens)


# Clock skew allowed between this machine and the identity provider for ``iat`` (seconds).
JWT_CLOCK_LEEWAY = 60.0
# The last second of year 9999: an ``exp`` beyond it is a provider's bug, not a lifetime.
LATEST_EXPIRY = 253402300799


def lifetime_problem(
    claims: dict[str, Any], max_lifetime: float | None, now: float | None = None
) -> str | None:
    """Why a verified token's times are refused (``iat`` in the future beyond the clock
    leeway, an absurd ``exp``, a lifetime over *max_lifetime*), or None."""
    now = time.time() if now is None else now
    exp, iat = claims.get("exp"), claims.get("iat")
    if not isinstance(exp, int | float) or exp > LATEST_EXPIRY:
        return "its exp is not a time before the year 10000"
    if iat is not None:
        if not isinstance(iat, int | float):
            return "its iat is not a time"
        if iat > now + JWT_CLOCK_LEEWAY:
            return f"it was issued {iat - now:.0f} s in the future (iat)"
    if max_lifetime is not None:
        lifetime = exp - (iat if isinstance(iat, int | float) else now)
        if lifetime > max_lifetime:
            return f"it lives {lifetime:.0f} s, more than max_token_lifetime ({max_lifetime:g} s)"
    return None


def jwt_verifier(config: JwtAuthConfig) -> TokenVerifier:
    """fastmcp's ``JWTVerifier`` for *config*, refusing tokens that name no subject or expiry,
    that were issued in the future, or that live longer than ``max_token_lifetime``.

    Without ``sub`` a call could not be told apart from the daemon's own identity
    (per-user upstream tokens); without ``exp`` a leaked token would work for ever.
    """
    # Imported here, and so the class defined here: fastmcp's JWT verifier needs the
    # cryptography package, which only JWT auth requires (no dependency of this package).
    from fastmcp.server.auth.providers.jwt import JWTVerifier

    class IdentityProviderTokens(JWTVerifier):
        async def verify_token(self, token: str) -> AccessToken | None:
            verified = await super().verify_token(token)
            if verified is None:
                return None
            if verified.expires_at is None or not verified.subject:
                log.debug(
                    "refused a token of client %s: it has no exp or no sub", verified.client_id
                )
                return None
            problem = lifetime_problem(verified.claims, config.max_token_lifetime)
            if problem is not None:
                log.info("refused a token of %s: %s", verified.subject, problem)
                return None
            return verified

    return IdentityProviderTokens(
        http_client=_key_fetcher(config.jwks_uri),
        jwks_uri=config.jwks_uri,
        issuer=config.issuer,
        audience=config.audience,
        algorithm=config.algorithm,
        required_scopes=config.required_scopes or None,
        jwks_refresh_interval=config.jwks_refresh_interval,
    )


def _key_fetcher(jwks_uri: str) -> Any:
    """The HTTP client that fetches the provider's keys, saying so when it cannot.

    (The verifier only logs a failed fetch at DEBUG; then every JWT is refused with
    nothing on stderr to say why.)
    """
    return httpx2.AsyncClient(transport=SayFailures(jwks_uri), timeout=10.0)


class SayFailures(httpx2.AsyncHTTPTransport):
    """An HTTP transport that logs a failed fetch of *jwks_uri*'s keys as a warning."""

    def __init__(self, jwks_uri: str) -> None:
        super().__init__()
        self.jwks_uri = jwks_uri

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        try:
            response = await super().handle_async_request(request)
        except httpx2.HTTPError as exc:
            reason = str(exc)[:300] or type(exc).__name__
            log.warning("cannot fetch the signing keys from %s: %s", self.jwks_uri, reason)
            raise
        if response.status_code >= 400:
            log.warning(
                "cannot fetch the signing keys from %s: HTTP %d",
                self.jwks_uri,
                response.status_code,
            )
        return response


def caller_tokens(static: TokenVerifier | None, by_jwt: TokenVerifier | None) -> TokenVerifier:
    """One verifier for both: a static token first (cheap, constant-time), then a JWT."""
    return CallerTokens(static, by_jwt)


class StaticBearerTokens(TokenVerifier):
    """Fixed tokens, compared in constant time; the client id names the token by position."""

    def __init__(self, tokens: list[str]) -> None:
        super().__init__()
        self.expected = [token.encode() for token in tokens]

    async def verify_token(self, token: str) -> AccessToken | None:
        given = token.strip().encode()
        matches = [hmac.compare_digest(given, candidate) for candidate in self.expected]
        if not any(matches):
            return None
        # The client id names the token by position: a session stays with its token.
        return AccessToken(token=token, client_id=f"token-{matches.index(True) + 1}", scopes=[])


class CallerTokens(TokenVerifier):
    """A static token first (cheap, constant-time), then a JWT."""

    def __init__(self, static: TokenVerifier | None, by_jwt: TokenVerifier | None) -> None:
        super().__init__()
        self.static, self.by_jwt = static, by_jwt

    async def verify_token(self, token: str) -> AccessToken | None:
        if self.static is not None and (found := await self.static.verify_token(token)):
            return found
        if self.by_jwt is not None and token.count(".") == 2:
            return await self.by_jwt.verify_token(token)
        return None
