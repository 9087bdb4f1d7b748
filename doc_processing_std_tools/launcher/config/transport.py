"""The ``transport:`` section: stdio or streamable HTTP, its limits, and who may call over HTTP
(bearer token, identity-provider JWTs); each default in one place."""

from __future__ import annotations

import ipaddress
import socket
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from .model_base import OneOrMany, StrictModel, http_url

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
DEFAULT_HTTP_PATH = "/mcp"
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024  # HTTP request body cap (413 beyond)
DEFAULT_MAX_CONNECTIONS = 1000  # open HTTP connections (503 beyond)
DEFAULT_HEADER_TIMEOUT = 10.0  # seconds a client has to send a request's headers
DEFAULT_PENDING_HEADER_TIMEOUT = 2.0  # the same, before a connection has shown a valid token
DEFAULT_MAX_CONNECTIONS_PER_CLIENT = 64  # open HTTP connections of one client address (429 beyond)
DEFAULT_IDLE_TIMEOUT = 5.0  # seconds a keep-alive connection may sit idle
DEFAULT_SESSION_IDLE_TIMEOUT = 3600.0  # seconds an unused MCP session lives
DEFAULT_MAX_SESSIONS = 10_000  # open MCP sessions (~40 KB each; 503 beyond)
DEFAULT_SHUTDOWN_GRACE = 10.0  # seconds in-flight calls get on SIGTERM/SIGINT

JwtAlgorithm = Literal[
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"
]
DEFAULT_JWKS_REFRESH_INTERVAL = 30.0  # least seconds between two JWKS fetches for unknown keys


class JwtAuthConfig(StrictModel):
    """Access tokens from the team's identity provider, verified with its published keys."""

    jwks_uri: str
    issuer: str
    audience: OneOrMany
    required_scopes: list[str] = Field(default_factory=list)
    algorithm: JwtAlgorithm = "RS256"
    # The MCP endpoint's public URL, for the protected-resource metadata (RFC 9728);
    # unset: each request's scheme and Host header with transport.path.
    resource: str | None = None
    jwks_refresh_interval: float = Field(DEFAULT_JWKS_REFRESH_INTERVAL, ge=0)
    # the longest a token may live (exp - iat, or exp - now without iat), in seconds; unset:
    # any lifetime the provider signs
    max_token_lifetime: float | None = Field(None, gt=0)

    @field_validator("jwks_uri")
    @classmethod
    def _keys_over_https(cls, value: str) -> str:
        return http_url(value, secure=True)

    @field_validator("issuer", "resource")
    @classmethod
    def _an_http_url(cls, value: str | None) -> str | None:
        return value if value is None else http_url(value, secure=False)

    @field_validator("audience")
    @classmethod
    def _some_audience(cls, value: list[str]) -> list[str]:
        if not value or not all(item.strip() for item in value):
            raise ValueError("name the audience your identity provider puts in tokens, e.g. dpt")
        return value


class AuthConfig(StrictModel):
    """Who may call over HTTP: static bearer tokens, identity-provider JWTs, or both.

    ``auth: none`` (stored as ``token: null``) turns authentication off explicitly.
    """

    token: list[SecretStr] | None = None
    jwt: JwtAuthConfig | None = None

    @model_validator(mode="before")
    @classmethod
    def _none_means_off(cls, value: Any) -> Any:
        return {"token": None} if isinstance(value, str) and value.lower() == "none" else value

    @field_validator("token", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str | SecretStr) else value

    @field_validator("token")
    @classmethod
    def _not_empty(cls, value: list[SecretStr] | None) -> list[SecretStr] | None:
        if value is not None and not value:
            raise ValueError("give at least one token, or write auth: none")
        if value and any(not token.get_secret_value().strip() for token in value):
            raise ValueError("a token is empty; set the variable it comes from, e.g. DPT_TOKEN")
        return value

    @model_validator(mode="after")
    def _some_way_in(self) -> AuthConfig:
        if self.token is None and self.jwt is None and "token" not in self.model_fields_set:
            raise ValueError("give token: or jwt: (or write auth: none)")
        return self


class EventStoreConfig(StrictModel):
    """Where an HTTP session's stream events are kept for replay (``Last-Event-ID``)."""

    url: str = Field(pattern=r"^(redis|rediss|valkey|valkeys|unix)://")
    ttl: int = Field(3600, ge=1)  # seconds an event is kept
    max_events_per_stream: int = Field(100, ge=1)


class TransportConfig(StrictModel):
    """How the composed server talks to its client. HTTP defaults: docs/launcher.md."""

    type: Literal["stdio", "http"] = "stdio"
    # Before ``host``: the host check reads it.
    auth: AuthConfig | None = None
    host: str = DEFAULT_HOST
    port: int = Field(DEFAULT_PORT, ge=0, le=65535)
    path: str = DEFAULT_HTTP_PATH
    stateless: bool = False
    allowed_hosts: list[str] = Field(default_factory=list)
    allowed_origins: list[str] = Field(default_factory=list)
    json_response: bool = False  # True: SDK JSON mode, no back-channel during calls
    console: bool = True  # the operator console at /ui (HTTP; docs/ui.md)
    max_body_bytes: int = Field(DEFAULT_MAX_BODY_BYTES, ge=1)
    max_connections: int = Field(DEFAULT_MAX_CONNECTIONS, ge=1)
    header_timeout: float = Field(DEFAULT_HEADER_TIMEOUT, gt=0)
    # connections that have shown no valid token yet: a shorter header deadline, and a cap
    pending_header_timeout: float = Field(DEFAULT_PENDING_HEADER_TIMEOUT, gt=0)
    max_connections_per_client: int | None = Field(DEFAULT_MAX_CONNECTIONS_PER_CLIENT, ge=1)
    idle_timeout: float = Field(DEFAULT_IDLE_TIMEOUT, gt=0)
    session_idle_timeout: float = Field(DEFAULT_SESSION_IDLE_TIMEOUT, gt=0)
    max_sessions: int = Field(DEFAULT_MAX_SESSIONS, ge=1)
    shutdown_grace: float = Field(DEFAULT_SHUTDOWN_GRACE, ge=0)
    log_format: Literal["text", "json"] = "text"
    event_store: EventStoreConfig | None = None

    @field_validator("path")
    @classmethod
    def _path_starts_with_slash(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError("must start with '/', e.g. /mcp")
        return value

    @field_validator("host")
    @classmethod
    def _no_open_bind_without_auth(cls, value: str, info: ValidationInfo) -> str:
        open_bind = info.data.get("type") == "http" and info.data.get("auth") is None
        if open_bind and not is_loopback_host(value):
            raise PydanticCustomError(
                "insecure_bind",
                f"serving HTTP on {value} without auth exposes every tool to the network; "
                "set a token (transport.auth.token, e.g. from $DPT_TOKEN), or write "
                "transport.auth: none to accept the risk",
            )
        return value

    @property
    def tokens(self) -> list[str]:
        """The accepted bearer tokens; empty when auth is off."""
        if self.auth is None or self.auth.token is None:
            return []
        return [token.get_secret_value() for token in self.auth.token]

    @property
    def jwt(self) -> JwtAuthConfig | None:
        """How identity-provider tokens are verified; None when they are not accepted."""
        return None if self.auth is None else self.auth.jwt


def is_loopback_host(host: str) -> bool:
    """True when *host* names only loopback addresses (unresolvable names: bind reports them)."""
    name = host.strip("[]")
    if name.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(name, None)
    except (OSError, UnicodeError):
        return True  # cannot be bound either; the bind error names it
    return all(ipaddress.ip_address(str(info[4][0]).split("%")[0]).is_loopback for info in infos)
