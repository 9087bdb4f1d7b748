"""The mcp SDK's OAuth client provider, changed where a long-lived session needs it.

Pinned by ``tests/seams/``. Importing this module costs ~15 ms (``mcp.client.auth``): only
``launcher/external/oauth.py`` imports it, when a server has ``auth``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from mcp.client.auth import OAuthClientProvider
from mcp.shared.auth import OAuthMetadata, ProtectedResourceMetadata


class LongLivedOAuthProvider(OAuthClientProvider):
    """The SDK's provider, changed for a long-lived session (see :func:`oauth_client_provider`)."""

    _refreshing = False
    _tried: str | None = None

    def __init__(
        self,
        server_url: str,
        client_metadata: Any,
        storage: Any,
        *,
        redirect_handler: Callable[[str], Awaitable[None]],
        callback_handler: Callable[[], Awaitable[Any]],
        refused: Callable[[], Awaitable[None]],
        margin: Callable[[float], float],
    ) -> None:
        super().__init__(
            server_url=server_url,
            client_metadata=client_metadata,
            storage=storage,
            redirect_handler=redirect_handler,
            callback_handler=callback_handler,
        )
        self._storage, self._refused, self._margin = storage, refused, margin

    async def _auth_flow(self, request: Any) -> Any:
        async with self.context.lock:
            if not self._initialized:
                await self._initialize()
            ready = self.context.is_token_valid()
            if ready:
                self._add_auth_header(request)
        if ready:
            response = yield request
            challenge = response.headers.get("www-authenticate", "")
            if response.status_code != 401 and not (
                response.status_code == 403 and "insufficient_scope" in challenge
            ):
                return
        flow = super()._auth_flow(request)
        try:
            outgoing = await flow.__anext__()
            while True:
                outgoing = await flow.asend((yield outgoing))
        except StopAsyncIteration:
            return
        finally:
            await flow.aclose()

    async def _initialize(self) -> None:
        await super()._initialize()
        context = self.context
        found = await self._storage.discovered()
        if found and context.oauth_metadata is None:
            if found.get("as"):
                context.oauth_metadata = OAuthMetadata.model_validate(found["as"])
            if found.get("prm"):
                context.protected_resource_metadata = ProtectedResourceMetadata.model_validate(
                    found["prm"]
                )
            context.auth_server_url = found.get("as_url")
        if context.current_tokens is not None:
            context.token_expiry_time = await self._storage.refresh_at()

    def _early(self) -> None:
        context = self.context
        tokens = context.current_tokens
        if context.token_expiry_time is not None and tokens and tokens.expires_in:
            context.token_expiry_time -= self._margin(float(tokens.expires_in))

    async def _perform_authorization(self) -> Any:
        tokens = self.context.current_tokens
        if (
            tokens is not None
            and tokens.refresh_token
            and self.context.client_info is not None
            and self._tried != tokens.refresh_token
        ):
            self._tried = tokens.refresh_token
            self._refreshing = True
            return await self._refresh_token()
        return await super()._perform_authorization()

    async def _handle_token_response(self, response: Any) -> None:
        if self._refreshing:
            self._refreshing = False
            if not await self._handle_refresh_response(response):
                await self._refused()
            return
        await super()._handle_token_response(response)
        self._early()

    async def _handle_refresh_response(self, response: Any) -> bool:
        done = await super()._handle_refresh_response(response)
        if done:
            self._early()
        return done


def oauth_client_provider(
    server_url: str,
    client_metadata: Any,
    storage: Any,
    *,
    redirect_handler: Callable[[str], Awaitable[None]],
    callback_handler: Callable[[], Awaitable[Any]],
    refused: Callable[[], Awaitable[None]],
    margin: Callable[[float], float],
) -> LongLivedOAuthProvider:
    """The mcp SDK's ``OAuthClientProvider`` (an ``httpx2.Auth``), changed where a long-lived
    session needs it. Its private steps used: ``_auth_flow``, ``_initialized``, ``_initialize``,
    ``_add_auth_header``, ``_perform_authorization``, ``_refresh_token``,
    ``_handle_token_response``, ``_handle_refresh_response`` and the ``context``
    (``OAuthContext``) fields ``lock``, ``current_tokens``, ``client_info``,
    ``token_expiry_time``, ``oauth_metadata``, ``protected_resource_metadata``,
    ``auth_server_url``.

    - A token loaded from *storage* keeps its expiry (``storage.refresh_at()``; the SDK
      would take it for valid until a 401), and the discovered metadata
      (``storage.discovered()``), so a refresh goes to the authorization server's token
      endpoint with the RFC 8707 ``resource``, not to the MCP server's origin.
    - A token counts as expired *margin(lifetime)* seconds early: it is refreshed before the
      server could refuse it.
    - A 401 while a refresh token is held refreshes once (the SDK would start a browser
      login); a refused refresh awaits *refused()*, which raises.
    - *storage* learns the discovered metadata with each new token
      (``storage.discovery = ...``: a callable giving a JSON-able dict).
    - A request with a valid token goes out without the flow's lock held until its answer
      (``_auth_flow`` holds ``context.lock`` across the request, so a session's calls ran one
      at a time); a request that needs a refresh, or whose answer is a 401 or a scope step-up,
      goes through the SDK's whole flow under the lock (which sends it again).
    """
    provider = LongLivedOAuthProvider(
        server_url=server_url,
        client_metadata=client_metadata,
        storage=storage,
        redirect_handler=redirect_handler,
        callback_handler=callback_handler,
        refused=refused,
        margin=margin,
    )

    def discovery() -> dict[str, Any]:
        context = provider.context
        return {
            "as": context.oauth_metadata.model_dump(mode="json", exclude_none=True)
            if context.oauth_metadata
            else None,
            "prm": context.protected_resource_metadata.model_dump(mode="json", exclude_none=True)
            if context.protected_resource_metadata
            else None,
            "as_url": context.auth_server_url,
        }

    storage.discovery = discovery
    return provider
