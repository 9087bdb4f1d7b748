"""The launcher's YAML config: typed schema, defaults in one place, errors that name file, line and key.

Example (``configs/tools.yaml``)::

    name: doc-processing-std-tools
    transport: stdio                 # or {type: http, host: 127.0.0.1, port: 8765, path: /mcp}
    servers:
      memory:                        # mount name
        server: memory-tools         # registered name (defaults to the mount name)
        namespace: mem               # optional tool-name prefix: mem_write_memory
        enabled: true
        settings:
          memory_dir: ${MEMORY_DIR:-./agent_memory}

Relative paths in ``settings`` resolve against the config file's folder.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from .pins import PinsConfig
from .yaml_file import (
    ConfigError,
    describe_validation_error,
    expand_env,
    format_error,
    parse_yaml,
)

DEFAULT_NAME = "doc-processing-std-tools"
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
NAMESPACE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9-]*$"  # no "_": the joiner must stay unambiguous
HEADER_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")  # RFC 9110's token


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


JwtAlgorithm = Literal[
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"
]
DEFAULT_JWKS_REFRESH_INTERVAL = 30.0  # least seconds between two JWKS fetches for unknown keys


def _http_url(value: str, *, secure: bool) -> str:
    """*value* as an http(s) URL with a host; with *secure*, plain http only for a loopback host."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 (raises ValueError when out of range or not a number)
    except ValueError as exc:
        raise ValueError(f"not a usable URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("give an http(s) URL with a host, e.g. https://idp.example.com/")
    if secure and parts.scheme == "http" and not _loopback_literal(parts.hostname):
        raise ValueError("use https (plain http is accepted only for a loopback host)")
    return value


def _loopback_literal(host: str) -> bool:
    """True for ``localhost`` or a loopback address written out (no name lookup)."""
    import ipaddress

    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class JwtAuthConfig(_Strict):
    """Access tokens from the team's identity provider, verified with its published keys."""

    jwks_uri: str
    issuer: str
    audience: list[str]
    required_scopes: list[str] = Field(default_factory=list)
    algorithm: JwtAlgorithm = "RS256"
    # The MCP endpoint's public URL, for the protected-resource metadata (RFC 9728);
    # unset: each request's scheme and Host header with transport.path.
    resource: str | None = None
    jwks_refresh_interval: float = Field(DEFAULT_JWKS_REFRESH_INTERVAL, ge=0)

    @field_validator("jwks_uri")
    @classmethod
    def _keys_over_https(cls, value: str) -> str:
        return _http_url(value, secure=True)

    @field_validator("issuer", "resource")
    @classmethod
    def _an_http_url(cls, value: str | None) -> str | None:
        return value if value is None else _http_url(value, secure=False)

    @field_validator("audience", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("audience")
    @classmethod
    def _some_audience(cls, value: list[str]) -> list[str]:
        if not value or not all(item.strip() for item in value):
            raise ValueError("name the audience your identity provider puts in tokens, e.g. dpt")
        return value


class AuthConfig(_Strict):
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


class EventStoreConfig(_Strict):
    """Where an HTTP session's stream events are kept for replay (``Last-Event-ID``)."""

    url: str = Field(pattern=r"^(redis|rediss|valkey|valkeys|unix)://")
    ttl: int = Field(3600, ge=1)  # seconds an event is kept
    max_events_per_stream: int = Field(100, ge=1)


class TransportConfig(_Strict):
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
    import ipaddress
    import socket

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


class ToolFilter(_Strict):
    """Globs on the server's own tool names (before its namespace): which tools to expose."""

    include: list[str] = Field(default_factory=lambda: ["*"])
    exclude: list[str] = Field(default_factory=list)

    def admits(self, name: str) -> bool:
        from fnmatch import fnmatchcase

        return any(fnmatchcase(name, p) for p in self.include) and not any(
            fnmatchcase(name, p) for p in self.exclude
        )


DEFAULT_CALL_TIMEOUT = 60.0  # seconds per tool call, any server kind
# one stdout line (one message) of a command; as big as the largest reply taken from a URL server
DEFAULT_MAX_LINE_BYTES = 64 * 1024 * 1024
DEFAULT_PING_TIMEOUT = 20.0  # seconds an idle external server has to answer a ping
DEFAULT_START_TIMEOUT = 30.0  # seconds an external server has to start and answer initialize
DEFAULT_START_GRACE = 10.0  # seconds serving waits for external servers still starting


class OAuthSettings(_Strict):
    """A ``url:`` server's OAuth login (``auth: oauth``): tokens come from ``dpt-launch login``.

    Without ``client_id`` the launcher registers itself with the authorization server
    (dynamic client registration); with one, that client is used (register the redirect URI
    ``http://127.0.0.1:PORT/callback`` with it and set ``callback_port``)."""

    client_id: str | None = Field(None, min_length=1)
    client_secret: SecretStr | None = None
    scopes: list[str] = Field(default_factory=list)
    callback_port: int | None = Field(None, ge=1, le=65535)

    @field_validator("scopes", mode="before")
    @classmethod
    def _space_separated(cls, value: Any) -> Any:
        return value.split() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _secret_needs_id(self) -> OAuthSettings:
        if self.client_secret is not None and self.client_id is None:
            raise ValueError("'client_secret' needs the 'client_id' it belongs to")
        return self


class UpstreamAuth(_Strict):
    """How the launcher signs in to a ``url:`` server: ``auth: oauth`` or ``auth: {oauth: {...}}``."""

    oauth: OAuthSettings

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        if isinstance(value, str):
            if value.strip().lower() == "oauth":
                return {"oauth": {}}
            raise ValueError(f"{value[:40]!r} is not a known auth; write auth: oauth")
        if isinstance(value, dict) and value.get("oauth") is None and "oauth" in value:
            return {**value, "oauth": {}}
        return value


class ServerEntry(_Strict):
    """One mounted server: in-process (``server`` / ``module``) or external (``command`` / ``url``)."""

    server: str | None = None
    module: str | None = None
    command: str | None = Field(None, min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = Field(None, pattern=r"^https?://")
    headers: dict[str, str] = Field(default_factory=dict)
    auth: UpstreamAuth | None = None  # url servers: OAuth (docs/auth.md)
    namespace: str | None = Field(None, pattern=NAMESPACE_PATTERN, max_length=30)
    enabled: bool = True
    required: bool = False
    timeout: float = Field(DEFAULT_CALL_TIMEOUT, gt=0)
    lock: Literal["auto", "always", "never"] = "auto"
    ping_timeout: float = Field(DEFAULT_PING_TIMEOUT, gt=0)
    max_line_bytes: int = Field(DEFAULT_MAX_LINE_BYTES, ge=1024)
    start_timeout: float = Field(DEFAULT_START_TIMEOUT, gt=0)
    tools: ToolFilter = Field(default_factory=ToolFilter)
    settings: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_source(self) -> ServerEntry:
        given = [key for key in ("server", "module", "command", "url") if getattr(self, key)]
        if len(given) > 1:
            raise ValueError(f"give one of 'server', 'module', 'command' or 'url', not {given}")
        if "max_line_bytes" in self.model_fields_set and not self.command:
            raise ValueError("'max_line_bytes' applies only to a 'command' server")
        for key in ("args", "env", "cwd"):
            if getattr(self, key) and not self.command:
                raise ValueError(f"{key!r} applies only to a 'command' server")
        for key in ("ping_timeout", "start_timeout"):
            if key in self.model_fields_set and not (self.command or self.url):
                raise ValueError(f"{key!r} applies only to an external server")
        if self.headers and not self.url:
            raise ValueError("'headers' applies only to a 'url' server")
        if self.auth is not None and not self.url:
            raise ValueError("'auth' applies only to a 'url' server")
        if self.auth is not None and any(h.lower() == "authorization" for h in self.headers):
            raise ValueError(
                "give either 'auth' or an Authorization header, not both (the login sets it)"
            )
        if self.settings and (self.command or self.url):
            raise ValueError("an external server ('command' or 'url') takes no 'settings'")
        return self

    @field_validator("url")
    @classmethod
    def _reachable_url(cls, value: str | None) -> str | None:
        """A URL that could never be connected to is a config error, not a skipped server."""
        if value is None:
            return value
        from urllib.parse import urlsplit

        try:
            parts = urlsplit(value)
            parts.port  # noqa: B018 (raises ValueError when out of range or not a number)
        except ValueError as exc:
            raise ValueError(f"not a usable URL: {exc}") from None
        if not parts.hostname:
            raise ValueError("the URL names no host, e.g. https://mcp.example.com/mcp")
        return value

    @field_validator("headers")
    @classmethod
    def _valid_headers(cls, value: dict[str, str]) -> dict[str, str]:
        for name, text in value.items():
            if not HEADER_NAME.match(name):
                raise ValueError(
                    f"{name[:100]!r} is not a valid HTTP header name "
                    "(letters, digits and !#$%&'*+-.^_`|~, no spaces)"
                )
            if "\r" in text or "\n" in text or "\0" in text:
                raise ValueError(f"the value of header {name!r} holds a line break or NUL")
        return value

    @property
    def external(self) -> bool:
        return bool(self.command or self.url)


PROFILE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,39}$"  # one URL path segment: /mcp/NAME


class ProfileConfig(_Strict):
    """What one client accepts, and what the launcher shows it (``profiles:``; docs/clients.md).

    Every field left out keeps the built-in profile's value of the same name, else no limit.
    """

    max_tools: int | None = Field(None, ge=1)
    max_name_length: int | None = Field(None, ge=16, le=128)
    name_prefix: str | None = Field(None, max_length=40)  # how the client counts: "{server}__"
    server_name: str | None = Field(None, pattern=r"^[A-Za-z0-9_-]{1,40}$")  # the client's key
    map_chars: bool | None = None  # characters outside [A-Za-z0-9_-] become '_'
    include: list[str] | None = None
    exclude: list[str] | None = None
    pin: list[str] | None = None
    search: Literal["off", "auto", "always"] | None = None
    descriptions: Literal["full", "short"] | None = None
    max_tool_tokens: int | None = Field(None, ge=1)  # the client's own switch (Claude Code's 10%)
    search_results: int | None = Field(None, ge=1, le=50)

    @field_validator("search", mode="before")
    @classmethod
    def _yaml_off(cls, value: Any) -> Any:
        """YAML reads a bare ``off`` as false (and ``on`` as true)."""
        return {False: "off", True: "auto"}.get(value, value) if isinstance(value, bool) else value


class TelemetryConfig(_Strict):
    """Metrics and traces (docs/launcher.md#telemetry)."""

    metrics: bool = True  # GET /metrics on the HTTP transport (Prometheus text format)
    otlp_endpoint: str | None = None  # an OTLP/HTTP collector: one span per tool call goes there
    service_name: str | None = None  # the spans' service.name (default: the config's name)

    @field_validator("otlp_endpoint")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^/\s]+", value):
            raise ValueError(
                "otlp_endpoint must be an http:// or https:// URL, e.g. http://127.0.0.1:4318"
            )
        return value


class LockConfig(_Strict):
    """A fleet-wide lock (``lock:``): every locked call of every launcher on this config takes it
    too, on one Redis or Valkey (docs/scaling.md#a-lock-for-the-fleet)."""

    url: str = Field(pattern=r"^(redis|rediss|valkey|valkeys|unix)://")
    name: str = Field("default", pattern=NAMESPACE_PATTERN, max_length=100)
    lease: float = Field(10.0, gt=0)


AUDIT_STDOUT = "stdout"  # audit.path: the lines go to standard output (containers)
RATE_UNITS = {"s": 1.0, "sec": 1.0, "min": 60.0, "m": 60.0, "h": 3600.0, "hour": 3600.0}


class AuditConfig(_Strict):
    """The audit log (``audit:``): one JSON line per tool call (docs/trust.md#audit-log)."""

    path: str  # a file (relative to the config's folder), or ``stdout``
    max_bytes: int = Field(10 * 1024 * 1024, ge=0)  # rotate before the file passes it; 0: never
    backups: int = Field(5, ge=0)  # rotated files kept (FILE.1 ... FILE.N)
    arguments: bool = False  # the call's arguments in each line (their size and hash always)
    fsync: bool = False  # each line reaches the disk before its answer (survives a power loss)

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        return {"path": value} if isinstance(value, str) else value

    @field_validator("path")
    @classmethod
    def _not_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("give a file for the audit lines, or stdout")
        return value


class RateLimitRule(_Strict):
    """One rate limit (``rate_limits:``): a token bucket of *rate* and *burst* for the calls
    whose tool and caller match (docs/trust.md#rate-limits)."""

    tools: list[str] = Field(default_factory=lambda: ["*"])  # globs on the names clients see
    users: list[str] = Field(default_factory=lambda: ["*"])  # globs on who is calling
    rate: str  # calls per unit: "10/s", "100/min", "1000/h"
    burst: int | None = Field(None, ge=1)  # calls at once (default: the count of rate)
    per: Literal["user", "tool", "user_tool", "everyone"] = "user"  # who shares a bucket

    @field_validator("tools", "users", mode="before")
    @classmethod
    def _one_glob(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("rate", mode="before")
    @classmethod
    def _rate(cls, value: Any) -> Any:
        if isinstance(value, int | float) and not isinstance(value, bool):
            value = f"{value:g}/s"
        if not isinstance(value, str):
            return value
        count, _, unit = value.replace(" ", "").partition("/")
        try:
            calls = float(count)
        except ValueError:
            calls = -1.0
        if calls <= 0 or unit.lower() not in RATE_UNITS:
            raise ValueError("write the rate as calls per s, min or h, e.g. 10/s or 100/min")
        return value

    @property
    def per_second(self) -> float:
        """Calls per second the bucket refills."""
        count, _, unit = self.rate.replace(" ", "").partition("/")
        return float(count) / RATE_UNITS[unit.lower()]

    @property
    def capacity(self) -> int:
        """Calls that may come at once."""
        if self.burst is not None:
            return self.burst
        return max(1, int(float(self.rate.replace(" ", "").partition("/")[0])))


class LauncherConfig(_Strict):
    """The whole file."""

    name: str = DEFAULT_NAME
    instructions: str | None = None
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "WARNING"
    start_grace: float = Field(DEFAULT_START_GRACE, ge=0)
    transport: TransportConfig = Field(default_factory=TransportConfig)
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)
    lock: LockConfig | None = None
    pins: PinsConfig = Field(default_factory=PinsConfig)  # approved definitions (config/pins.py)
    servers: dict[str, ServerEntry]
    profiles: dict[str, ProfileConfig] = Field(default_factory=dict)
    audit: AuditConfig | None = None  # one JSON line per tool call (docs/trust.md)
    rate_limits: list[RateLimitRule] = Field(default_factory=list)  # (docs/trust.md)

    @field_validator("profiles")
    @classmethod
    def _profile_names(cls, value: dict[str, ProfileConfig]) -> dict[str, ProfileConfig]:
        for name in value:
            if not re.match(PROFILE_NAME_PATTERN, name):
                raise ValueError(
                    f"profile name {name[:100]!r}: use letters, digits, '_' and '-' (at most 40; "
                    "it becomes the path /mcp/NAME)"
                )
        return value

    @field_validator("transport", mode="before")
    @classmethod
    def _transport_shorthand(cls, value: Any) -> Any:
        return {"type": value} if isinstance(value, str) else value

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @field_validator("servers")
    @classmethod
    def _at_least_one(cls, value: dict[str, ServerEntry]) -> dict[str, ServerEntry]:
        if not value:
            raise ValueError(
                "mount at least one server, e.g. servers: {memory: {server: memory-tools}}"
            )
        return value


@dataclass
class LoadedConfig:
    """A validated config plus what error messages need: its file and line numbers."""

    config: LauncherConfig
    path: Path
    lines: dict[tuple[str, ...], int] = field(default_factory=dict)

    @property
    def base_dir(self) -> Path:
        return self.path.parent

    def error(self, loc: tuple[str | int, ...], message: str) -> ConfigError:
        return ConfigError(format_error(self.path, self.lines, loc, message))


# -- loading -------------------------------------------------------------------


def load_config(
    path: str | os.PathLike[str], environ: dict[str, str] | None = None
) -> LoadedConfig:
    """Read, expand and validate *path*. Raises :class:`ConfigError` with a one-line message."""
    file = Path(path).expanduser()
    env = os.environ if environ is None else environ
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            f"{file}: config file not found; write a starter one with: dpt-launch init "
            f"{shlex.quote(str(file))} (or pass --config with the path of yours)"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(f"{file}: cannot read the config file: {reason}") from None
    file = file.resolve()

    data, lines = parse_yaml(text, file)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{file}:1: the config must be a mapping with a 'servers:' key")

    data = expand_env(data, (), env, file, lines)
    try:
        config = LauncherConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(
            describe_validation_error(exc, file, lines, model=LauncherConfig)
        ) from None
    return LoadedConfig(config, file, lines)
