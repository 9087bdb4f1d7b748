"""OAuth for ``url:`` servers (``auth: oauth``): the login flow and the serving side's tokens.

``dpt-launch login NAME`` runs the mcp SDK's authorization-code flow with PKCE
(protected-resource and authorization-server metadata discovery, dynamic client
registration where the server offers it, RFC 8707 ``resource`` on every token request)
with the browser sent to the authorization server and a loopback callback on
127.0.0.1 (fastmcp's callback server). The tokens go to the :class:`TokenStore`.

Serving, a session's HTTP client carries the stored tokens (:func:`serving_auth`); they
are refreshed before they expire and on a 401. A login that is missing, or whose refresh
the server refuses, raises :class:`NeedsLogin`: the server's state becomes
``needs-login`` until a new login is stored (``launcher/external/supervisor.py``).
No token is ever put in a message.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import urlsplit

import anyio
from fastmcp import Client, FastMCP
from fastmcp.client.oauth_callback import OAuthCallbackResult, create_oauth_callback_server
from fastmcp.client.transports import SSETransport, StreamableHttpTransport
from fastmcp.exceptions import ToolError
from fastmcp.tools import Tool
from fastmcp.utilities.http import find_available_port
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)
from mcp.types import ToolAnnotations
from pydantic import PrivateAttr

from ...exceptions import DptError
from ...seams.oauth_client import oauth_client_provider
from .tokens import TokenStore

if TYPE_CHECKING:
    from ..config.schema import OAuthSettings, ServerEntry

CLIENT_NAME = "dpt-launch"
CALLBACK_HOST = "127.0.0.1"
CALLBACK_TIMEOUT = 300.0  # seconds the browser step may take
DUMMY_REDIRECT = "http://127.0.0.1/callback"  # serving never redirects; the SDK wants one


def login_command(name: str, user: str | None = None) -> str:
    return f"dpt-launch login {name}" + (f" --user {user}" if user else "")


def needs_login_line(name: str, user: str | None = None) -> str:
    """What every call to a server without a usable login answers."""
    whose = f" for user {user!r}" if user else ""
    return f"server {name!r} needs a login{whose}: run {login_command(name, user)}"


def refresh_margin(lifetime: float) -> float:
    """Seconds before expiry a token is refreshed: a fifth of its lifetime, at most a minute."""
    return min(60.0, lifetime / 5)


class NeedsLogin(DptError):
    """No usable login: none stored, for another URL, or its refresh was refused."""


class _QuietNeedsLogin(logging.Filter):
    """The SDK logs every failed OAuth flow as an error; a missing login is said once, by the
    supervisor (``needs-login``), not again on each attempt."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not isinstance(error, NeedsLogin)


def _quiet_sdk_log() -> None:
    sdk = logging.getLogger("mcp.client.auth.oauth2")
    if not any(isinstance(f, _QuietNeedsLogin) for f in sdk.filters):
        sdk.addFilter(_QuietNeedsLogin())


def _oauth(entry: ServerEntry) -> OAuthSettings:
    assert entry.auth is not None
    return entry.auth.oauth


def login_state(record: dict[str, Any] | None, url: str, now: float | None = None) -> str:
    """A login's state for ``login --list``: never a token."""
    if record is None:
        return "no login"
    if record.get("url") != url:
        return "no login (the stored one is for another URL)"
    if record.get("refused"):
        return "refused: the server no longer accepts it"
    expires_at = record.get("expires_at")
    refreshable = bool((record.get("tokens") or {}).get("refresh_token"))
    if expires_at is None:
        return "logged in (no expiry given)"
    left = expires_at - (time.time() if now is None else now)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(expires_at))
    if left > 0:
        return f"logged in, access token expires {stamp}"
    if refreshable:
        return f"logged in, access token expired {stamp} (refreshed when next used)"
    return f"expired {stamp}: log in again"


def usable(record: dict[str, Any] | None, url: str) -> bool:
    return bool(record and record.get("url") == url and not record.get("refused"))


class StoredLogin:
    """The mcp SDK's ``TokenStorage`` over one (server, user) login of a :class:`TokenStore`.

    *fresh*: a new login (``dpt-launch login``): stored tokens are not offered, nor a
    dynamically registered client (registered for another loopback port)."""

    def __init__(
        self,
        store: TokenStore,
        name: str,
        url: str,
        user: str | None,
        *,
        static_client: Any = None,
        fresh: bool = False,
        on_saved: Callable[[str], None] | None = None,
    ) -> None:
        self.store, self.name, self.url, self.user = store, name, url, user
        self.static_client = static_client
        self.fresh = fresh
        self.on_saved = on_saved  # told the store's stamp after each write of ours
        self.discovery: Callable[[], dict[str, Any]] = dict  # set by seams.oauth_client_provider
        self._record: dict[str, Any] | None = None
        self._loaded = False

    async def record(self) -> dict[str, Any]:
        if not self._loaded:
            if not self.fresh:
                found = await anyio.to_thread.run_sync(self.store.get, self.name, self.user)
                self._record = found if usable(found, self.url) else None
            self._loaded = True
        return dict(self._record or {"url": self.url})

    async def _save(self, record: dict[str, Any]) -> None:
        self._record = record
        stamp = await anyio.to_thread.run_sync(self.store.put, self.name, record, self.user)
        if self.on_saved is not None:
            self.on_saved(stamp)

    async def get_tokens(self) -> Any:
        record = await self.record()
        if not record.get("tokens"):
            return None
        return OAuthToken.model_validate(record["tokens"])

    async def set_tokens(self, tokens: Any) -> None:
        record = await self.record()
        now = time.time()
        lifetime = float(tokens.expires_in) if tokens.expires_in else None
        record.update(
            tokens=tokens.model_dump(mode="json", exclude_none=True),
            expires_at=now + lifetime if lifetime else None,
            lifetime=lifetime,
            discovered=self.discovery(),
            refused=False,
            url=self.url,
        )
        await self._save(record)

    async def get_client_info(self) -> Any:
        if self.static_client is not None:
            return self.static_client
        record = await self.record()
        if not record.get("client"):
            return None
        return OAuthClientInformationFull.model_validate(record["client"])

    async def set_client_info(self, client_info: Any) -> None:
        if self.static_client is not None:
            return
        record = await self.record()
        record["client"] = client_info.model_dump(mode="json", exclude_none=True)
        self._record = record  # (kept with the tokens: a registration alone is no login)

    async def refresh_at(self) -> float | None:
        record = await self.record()
        expires_at, lifetime = record.get("expires_at"), record.get("lifetime")
        if expires_at is None:
            return None
        return float(expires_at) - (refresh_margin(float(lifetime)) if lifetime else 0.0)

    async def discovered(self) -> dict[str, Any] | None:
        return (await self.record()).get("discovered")

    async def mark_refused(self) -> None:
        """The server refused the refresh: ``login --list`` says so, and the launcher waits for a
        new login instead of trying the dead one again."""
        record = await anyio.to_thread.run_sync(self.store.get, self.name, self.user)
        if record is not None and usable(record, self.url):
            record["refused"] = True
            await anyio.to_thread.run_sync(self.store.put, self.name, record, self.user)


def client_metadata(settings: OAuthSettings, redirect_uri: str) -> Any:
    secret = settings.client_secret is not None
    return OAuthClientMetadata.model_validate(
        {
            "client_name": CLIENT_NAME,
            "redirect_uris": [redirect_uri],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "scope": " ".join(settings.scopes) or None,
            "token_endpoint_auth_method": "client_secret_post" if secret else "none",
        }
    )


def static_client(settings: OAuthSettings, redirect_uri: str) -> Any:
    """The configured client (``client_id``), or None: then the flow registers one."""
    if settings.client_id is None:
        return None
    metadata = client_metadata(settings, redirect_uri).model_dump(exclude_none=True)
    secret = settings.client_secret.get_secret_value() if settings.client_secret else None
    return OAuthClientInformationFull(
        client_id=settings.client_id, client_secret=secret, **metadata
    )


def serving_auth(
    name: str,
    entry: ServerEntry,
    store: TokenStore,
    user: str | None = None,
    on_needs_login: Callable[[], None] | None = None,
    on_saved: Callable[[str], None] | None = None,
) -> Any:
    """The ``httpx2.Auth`` a session to *entry*'s server uses for *user* (None: the launcher's
    own login): stored tokens, refreshed in time; :class:`NeedsLogin` when none will do.
    *on_saved* is told the store's stamp after each refresh it keeps (see :class:`StoredLogin`)."""
    assert entry.url
    _quiet_sdk_log()
    settings = _oauth(entry)
    redirect = (
        f"http://{CALLBACK_HOST}:{settings.callback_port}/callback"
        if settings.callback_port
        else DUMMY_REDIRECT
    )
    storage = StoredLogin(
        store,
        name,
        entry.url,
        user,
        static_client=static_client(settings, redirect),
        on_saved=on_saved,
    )

    async def refused(*_: Any) -> NoReturn:
        if on_needs_login is not None:
            on_needs_login()
        with contextlib.suppress(Exception):
            await storage.mark_refused()
        raise NeedsLogin(needs_login_line(name, user))

    async def no_callback() -> NoReturn:
        raise NeedsLogin(needs_login_line(name, user))

    return oauth_client_provider(
        entry.url,
        client_metadata(settings, redirect),
        storage,
        redirect_handler=refused,
        callback_handler=no_callback,
        refused=refused,
        margin=refresh_margin,
    )


async def login(
    name: str,
    entry: ServerEntry,
    store: TokenStore,
    user: str | None = None,
    *,
    show_url: Callable[[str], Awaitable[None]],
    timeout: float = CALLBACK_TIMEOUT,
) -> list[dict[str, Any]]:
    """Log in to *entry*'s server for *user*: the browser flow with a loopback callback, then
    one session that lists the tools (kept for when the login is missing later). *show_url*
    opens or prints the authorization URL. Returns the tools as MCP JSON."""
    assert entry.url
    settings = _oauth(entry)
    port = settings.callback_port or find_available_port(host=CALLBACK_HOST)
    redirect = f"http://{CALLBACK_HOST}:{port}/callback"
    result = OAuthCallbackResult()
    ready = anyio.Event()
    server = create_oauth_callback_server(
        port=port,
        host=CALLBACK_HOST,
        server_url=entry.url,
        result_container=result,
        result_ready=ready,
    )

    async def callback() -> AuthorizationCodeResult:
        with anyio.fail_after(timeout):
            await ready.wait()
        if result.error is not None:
            raise result.error
        return AuthorizationCodeResult(code=result.code or "", state=result.state, iss=result.iss)

    async def serve() -> None:
        try:
            await server.serve()
        except SystemExit:  # uvicorn exits when it cannot bind
            raise OSError(f"cannot listen for the login's callback on {redirect}") from None

    async with anyio.create_task_group() as group:
        group.start_soon(serve)
        try:
            listed = await login_flow(
                name, entry, store, user, redirect=redirect, show_url=show_url, callback=callback
            )
        finally:
            server.should_exit = True
    return listed


async def login_flow(
    name: str,
    entry: ServerEntry,
    store: TokenStore,
    user: str | None = None,
    *,
    redirect: str,
    show_url: Callable[[str], Awaitable[None]],
    callback: Callable[[], Awaitable[AuthorizationCodeResult]],
) -> list[dict[str, Any]]:
    """The login with the browser sent back to *redirect*, whose code *callback* hands over
    (the SDK checks its ``state`` and sends the PKCE verifier): the tokens go to *store*, then
    one session lists the tools. ``dpt-launch login`` serves *redirect* on loopback; the
    console, at a route of the daemon. Returns the tools as MCP JSON."""
    assert entry.url
    settings = _oauth(entry)
    storage = StoredLogin(
        store, name, entry.url, user, static_client=static_client(settings, redirect), fresh=True
    )

    async def refused() -> NoReturn:
        raise NeedsLogin("the authorization server refused the token request")

    auth = oauth_client_provider(
        entry.url,
        client_metadata(settings, redirect),
        storage,
        redirect_handler=show_url,
        callback_handler=callback,
        refused=refused,
        margin=refresh_margin,
    )
    headers = dict(entry.headers)
    client = Client(
        SSETransport(entry.url, headers=headers, auth=auth)
        if urlsplit(entry.url).path.rstrip("/").endswith("/sse")  # (as is_sse_url)
        else StreamableHttpTransport(entry.url, headers=headers, auth=auth)
    )
    async with client:
        tools = await client.list_tools()
    listed = [tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in tools]
    await anyio.to_thread.run_sync(store.save_tools, name, listed)
    if (await storage.get_tokens()) is None:
        raise NeedsLogin("the server asked for no login: remove 'auth' from its entry")
    return listed


class CachedTool(Tool):
    """A tool of a server that needs a login, listed from the cache: every call answers the
    line that says so."""

    _line: str = PrivateAttr(default="")

    async def run(self, arguments: dict[str, Any]) -> Any:
        raise ToolError(self._line)


def cached_listing(name: str, tools: list[dict[str, Any]], line: str) -> Any:
    """A FastMCP server listing *tools* (MCP JSON) whose every call answers *line*: what a
    server that needs a login lists meanwhile."""
    server = FastMCP(name)
    for tool in tools:
        try:
            annotations = tool.get("annotations")
            listed = CachedTool(
                name=tool["name"],
                description=tool.get("description"),
                parameters=tool.get("inputSchema") or {"type": "object"},
                output_schema=tool.get("outputSchema"),
                annotations=ToolAnnotations.model_validate(annotations) if annotations else None,
            )
            listed._line = line
            server.add_tool(listed)
        except Exception:  # a damaged entry is left out, not fatal
            continue
    return server
