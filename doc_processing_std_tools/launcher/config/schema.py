"""The launcher's YAML config: typed schema, defaults in one place, errors that name file, line and key.

The ``transport:`` section's models are in ``transport``; the base every model shares in
``model_base``.

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
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from .access import AccessRule
from .audit import AuditConfig
from .model_base import StrictModel
from .pins import PinsConfig
from .rate_limits import RateLimitRule
from .transport import TransportConfig
from .upstream_auth import OAuthSettings, UpstreamAuth
from .yaml_file import (
    ConfigError,
    describe_validation_error,
    expand_env,
    format_error,
    parse_yaml,
)

__all__ = [  # ConfigError and describe_validation_error are re-exported from yaml_file
    "DEFAULT_CALL_TIMEOUT",
    "DEFAULT_MAX_LINE_BYTES",
    "DEFAULT_MAX_SESSIONS",
    "DEFAULT_NAME",
    "DEFAULT_PING_TIMEOUT",
    "DEFAULT_SESSIONS",
    "DEFAULT_SESSION_IDLE_TIMEOUT",
    "DEFAULT_START_GRACE",
    "DEFAULT_START_TIMEOUT",
    "HEADER_NAME",
    "NAMESPACE_PATTERN",
    "PROFILE_NAME_PATTERN",
    "ConfigError",
    "LauncherConfig",
    "LoadedConfig",
    "LockConfig",
    "OAuthSettings",
    "ProfileConfig",
    "ServerEntry",
    "SessionMode",
    "TelemetryConfig",
    "ToolFilter",
    "UpstreamAuth",
    "describe_validation_error",
    "load_config",
]

DEFAULT_NAME = "doc-processing-std-tools"
NAMESPACE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9-]*$"  # no "_": the joiner must stay unambiguous
HEADER_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")  # RFC 9110's token


class ToolFilter(StrictModel):
    """Globs on the server's own tool names (before its namespace): which tools to expose."""

    include: list[str] = Field(default_factory=lambda: ["*"])
    exclude: list[str] = Field(default_factory=list)

    def admits(self, *names: str) -> bool:
        """Whether a tool known by *names* (its own, and as clients see it) passes: one of them
        matches an ``include`` glob and none matches an ``exclude`` one."""
        return any(fnmatchcase(n, p) for p in self.include for n in names) and not any(
            fnmatchcase(n, p) for p in self.exclude for n in names
        )


DEFAULT_CALL_TIMEOUT = 60.0  # seconds per tool call, any server kind
# one stdout line (one message) of a command; as big as the largest reply taken from a URL server
DEFAULT_MAX_LINE_BYTES = 64 * 1024 * 1024
DEFAULT_PING_TIMEOUT = 20.0  # seconds an idle external server has to answer a ping
DEFAULT_START_TIMEOUT = 30.0  # seconds an external server has to start and answer initialize
DEFAULT_START_GRACE = 10.0  # the most seconds serving waits for external servers starting
# How an external server's upstream sessions map to client sessions (``sessions:``): with
# ``per_client`` each client session has its own (its roots, log level, subscriptions,
# capabilities, clientInfo); with ``shared`` every client shares the launcher's one; with
# ``per_user`` each signed-in user has one. The default when unset: see ServerEntry.session_mode.
SessionMode = Literal["shared", "per_client", "per_user"]
DEFAULT_SESSIONS: dict[str, SessionMode] = {"command": "per_client", "url": "per_client"}
DEFAULT_MAX_SESSIONS = 16  # upstream sessions per server beside the launcher's own
DEFAULT_SESSION_IDLE_TIMEOUT = 600.0  # seconds an unused per-client/per-user session stays open


class ServerEntry(StrictModel):
    """One mounted server: in-process (``server`` / ``module``) or external (``command`` / ``url``).

    At most one of ``server``, ``module``, ``command`` and ``url`` says where the server comes
    from (none: ``server`` is the mount name); the other keys are described in the launcher
    guide (``docs/launcher.md``).

    Attributes:
        server: A registered server name, e.g. ``memory-tools``.
        module: ``pkg.mod`` (a server module) or ``pkg.mod:attr`` (a spec, instance or factory).
        command: An external server started as a child process over stdio, with ``args``,
            ``env`` and ``cwd``.
        url: An external server over streamable HTTP, with ``headers`` and ``auth`` (OAuth).
        namespace: A prefix for the server's tool names (``mem`` gives ``mem_write_memory``).
        enabled: ``False`` leaves the entry in the file without mounting it.
        required: Refuse to serve when this server cannot start (else it is skipped).
        timeout: Seconds a tool call may take.
        lock: ``auto``, ``always`` or ``never``: whether calls hold the process lock.
        settings: The server's own settings (its ``Settings`` model validates them).
    """

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
    sessions: SessionMode | None = None
    max_sessions: int = Field(DEFAULT_MAX_SESSIONS, ge=1)
    session_idle_timeout: float = Field(DEFAULT_SESSION_IDLE_TIMEOUT, gt=0)
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
        for key in (
            "ping_timeout",
            "start_timeout",
            "sessions",
            "max_sessions",
            "session_idle_timeout",
        ):
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
        if self.auth is not None and self.sessions not in (None, "per_user"):
            raise ValueError(
                "an 'auth: oauth' server has one session per signed-in user (each with their "
                "own login): leave 'sessions' out or give 'per_user'"
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

    @property
    def session_mode(self) -> SessionMode:
        """``sessions`` as given, else ``per_user`` for an OAuth server, else the kind's default
        (:data:`DEFAULT_SESSIONS`)."""
        if self.sessions is not None:
            return self.sessions
        if self.auth is not None:
            return "per_user"
        return DEFAULT_SESSIONS["command" if self.command else "url"]


PROFILE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,39}$"  # one URL path segment: /mcp/NAME
# The built-in profiles' names (their fields: compose/profiles.py's BUILTIN), served like the
# config's own, so an access: rule may name them.
BUILTIN_PROFILE_NAMES = ("claude-code", "claude-desktop", "cursor", "vscode", "codex", "windsurf")


class ProfileConfig(StrictModel):
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


class TelemetryConfig(StrictModel):
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


class LockConfig(StrictModel):
    """A fleet-wide lock (``lock:``): every locked call of every launcher on this config takes it
    too, on one Redis or Valkey (docs/scaling.md#a-lock-for-the-fleet)."""

    url: str = Field(pattern=r"^(redis|rediss|valkey|valkeys|unix)://")
    name: str = Field("default", pattern=NAMESPACE_PATTERN, max_length=100)
    lease: float = Field(10.0, gt=0)


class LauncherConfig(StrictModel):
    """The whole config file.

    Attributes:
        name: The composed server's name, as clients see it.
        instructions: Text put before the servers' own instructions.
        log_level: ``DEBUG``, ``INFO``, ``WARNING`` or ``ERROR`` (stderr).
        start_grace: The most seconds serving waits for external servers still starting (it
            stops sooner once the others are up: ``compose.building.wait_for_starts``).
        transport: ``stdio`` or ``http`` (with its host, port, path and auth).
        telemetry: Metrics and traces of every tool call.
        lock: The fleet lock shared by launchers on several machines.
        pins: What to do with tool definitions not approved in the lock file (``block``
            or ``warn``).
        servers: The mounted servers by mount name (at least one).
        profiles: Named subsets of the tools, each served at ``/mcp/NAME``.
        audit: One JSON line per tool call.
        rate_limits: Token buckets for the calls whose tool and caller match.
    """

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
    # who may use which servers, tools and profiles; None: everyone everything (config/access.py)
    access: list[AccessRule] | None = None

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

    def profile_names(self) -> list[str]:
        """Every profile name this config may use: the built-in ones, then its own."""
        return list(dict.fromkeys([*BUILTIN_PROFILE_NAMES, *self.profiles]))

    @model_validator(mode="after")
    def _access_names(self) -> LauncherConfig:
        """A server or profile an ``access:`` rule names without a glob must exist: a misspelt
        name would allow nothing, silently."""
        profiles = self.profile_names()
        for i, rule in enumerate(self.access or ()):
            for key, known in (("servers", list(self.servers)), ("profiles", profiles)):
                for name in getattr(rule, key):
                    if not any(c in name for c in "*?[") and name not in known:
                        where = "the config's servers" if key == "servers" else "known profiles"
                        raise ValueError(
                            f"access[{i}].{key}: no {key[:-1]} {name[:100]!r} in {where} "
                            f"({', '.join(known) or 'none'})"
                        )
        return self

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
        """The config file's folder: relative paths in settings resolve against it."""
        return self.path.parent

    def error(self, loc: tuple[str | int, ...], message: str) -> ConfigError:
        """A config error at the key *loc*, naming the file and the key's line.

        Args:
            loc: The key's path, e.g. ``("servers", "memory", "settings")``.
            message: What is wrong and how to fix it.

        Returns:
            The error, to raise.
        """
        return ConfigError(format_error(self.path, self.lines, loc, message))


# -- loading -------------------------------------------------------------------


def missing_config(file: Path) -> str:
    """The one wording of a config that is not there, for every verb."""
    return (
        f"{file}: config file not found; write a starter one with: dpt-launch init "
        f"{shlex.quote(str(file))} (or pass --config with the path of yours)"
    )


def load_config(
    path: str | os.PathLike[str], environ: dict[str, str] | None = None
) -> LoadedConfig:
    """Read, expand and validate the launcher config at *path*.

    Args:
        path: The YAML file (``~`` is expanded).
        environ: The variables ``${VAR}`` and ``${VAR:-default}`` expand from;
            ``os.environ`` when ``None``.

    Returns:
        The validated config with its resolved path and the line of every key.

    Raises:
        ConfigError: The file is missing or unreadable, is not a mapping with ``servers:``,
            names an unset variable, or fails validation; one line naming file, line and key.
    """
    file = Path(path).expanduser()
    env = os.environ if environ is None else environ
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(missing_config(file)) from None
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
