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

import difflib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
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

DEFAULT_NAME = "doc-processing-std-tools"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
DEFAULT_HTTP_PATH = "/mcp"
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024  # HTTP request body cap (413 beyond)
DEFAULT_MAX_CONNECTIONS = 1000  # open HTTP connections (503 beyond)
DEFAULT_HEADER_TIMEOUT = 10.0  # seconds a client has to send a request's headers
DEFAULT_IDLE_TIMEOUT = 5.0  # seconds a keep-alive connection may sit idle
DEFAULT_SESSION_IDLE_TIMEOUT = 3600.0  # seconds an unused MCP session lives
DEFAULT_MAX_SESSIONS = 10_000  # open MCP sessions (~40 KB each; 503 beyond)
DEFAULT_SHUTDOWN_GRACE = 10.0  # seconds in-flight calls get on SIGTERM/SIGINT
NAMESPACE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9-]*$"  # no "_": the joiner must stay unambiguous


class ConfigError(Exception):
    """A config problem, already phrased for the user as one line."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AuthConfig(_Strict):
    """Bearer tokens an HTTP client must send (``Authorization: Bearer <token>``).

    ``auth: none`` (stored as ``token: null``) turns authentication off explicitly.
    """

    token: list[SecretStr] | None

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
    idle_timeout: float = Field(DEFAULT_IDLE_TIMEOUT, gt=0)
    session_idle_timeout: float = Field(DEFAULT_SESSION_IDLE_TIMEOUT, gt=0)
    max_sessions: int = Field(DEFAULT_MAX_SESSIONS, ge=1)
    shutdown_grace: float = Field(DEFAULT_SHUTDOWN_GRACE, ge=0)
    log_format: Literal["text", "json"] = "text"

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


class ServerEntry(_Strict):
    """One mounted server: in-process (``server`` / ``module``) or external (``command`` / ``url``)."""

    server: str | None = None
    module: str | None = None
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = Field(None, pattern=r"^https?://")
    headers: dict[str, str] = Field(default_factory=dict)
    namespace: str | None = Field(None, pattern=NAMESPACE_PATTERN, max_length=30)
    enabled: bool = True
    required: bool = False
    timeout: float = Field(DEFAULT_CALL_TIMEOUT, gt=0)
    lock: Literal["auto", "always", "never"] = "auto"
    tools: ToolFilter = Field(default_factory=ToolFilter)
    settings: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_source(self) -> ServerEntry:
        given = [key for key in ("server", "module", "command", "url") if getattr(self, key)]
        if len(given) > 1:
            raise ValueError(f"give one of 'server', 'module', 'command' or 'url', not {given}")
        for key in ("args", "env", "cwd"):
            if getattr(self, key) and not self.command:
                raise ValueError(f"{key!r} applies only to a 'command' server")
        if self.headers and not self.url:
            raise ValueError("'headers' applies only to a 'url' server")
        if self.settings and (self.command or self.url):
            raise ValueError("an external server ('command' or 'url') takes no 'settings'")
        return self

    @property
    def external(self) -> bool:
        return bool(self.command or self.url)


class LauncherConfig(_Strict):
    """The whole file."""

    name: str = DEFAULT_NAME
    instructions: str | None = None
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "WARNING"
    transport: TransportConfig = Field(default_factory=TransportConfig)
    servers: dict[str, ServerEntry]

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
        return ConfigError(_format(self.path, self.lines, loc, message))


# -- loading -------------------------------------------------------------------

# ${VAR}, ${VAR:-default}, and $$ for a literal "$" (as in docker compose).
_VAR = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


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
            f"{file}: config file not found; pass --config with the path of your tools.yaml "
            "(see configs/tools.yaml for an example)"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(f"{file}: cannot read the config file: {reason}") from None
    file = file.resolve()

    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{file}:{mark.line + 1}" if mark else str(file)
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(
            f"{where}: invalid YAML: {problem}; check indentation and quoting"
        ) from None

    lines: dict[tuple[str, ...], int] = {}
    if node is not None:
        _collect_lines(node, (), lines)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{file}:1: the config must be a mapping with a 'servers:' key")

    data = _expand(data, (), env, file, lines)
    try:
        config = LauncherConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc, file, lines)) from None
    return LoadedConfig(config, file, lines)


def _collect_lines(
    node: yaml.Node, prefix: tuple[str, ...], out: dict[tuple[str, ...], int]
) -> None:
    out.setdefault(prefix, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = (*prefix, str(key_node.value))
            out[key] = key_node.start_mark.line + 1
            _collect_lines(value_node, key, out)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _collect_lines(item, (*prefix, str(index)), out)


def _expand(
    value: Any, loc: tuple[str, ...], env: Any, file: Path, lines: dict[tuple[str, ...], int]
) -> Any:
    """Expand ``${VAR}``, ``${VAR:-default}`` and ``$$`` in every string value (never in keys).

    As in the shell: ``${VAR}`` needs VAR set (empty is fine); ``${VAR:-default}``
    takes the default when VAR is unset or empty.
    """
    if isinstance(value, dict):
        return {k: _expand(v, (*loc, str(k)), env, file, lines) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, (*loc, str(i)), env, file, lines) for i, v in enumerate(value)]
    if not isinstance(value, str) or "$" not in value:
        return value

    def substitute(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name is None:
            return "$"
        found = env.get(name)
        if default is not None:
            return found or default
        if found is not None:
            return found
        raise ConfigError(
            _format(
                file,
                lines,
                loc,
                f"environment variable {name} is not set; set it, or give a default: ${{{name}:-value}}",
            )
        )

    return _VAR.sub(substitute, value)


# -- error messages ------------------------------------------------------------


def _format(
    file: Path, lines: dict[tuple[str, ...], int], loc: tuple[str | int, ...], message: str
) -> str:
    key = tuple(str(part) for part in loc)
    line = None
    for depth in range(len(key), -1, -1):
        line = lines.get(key[:depth])
        if line is not None:
            break
    where = f"{file}:{line}" if line else str(file)
    dotted = ".".join(key)
    return f"{where}: {dotted}: {message}" if dotted else f"{where}: {message}"


def describe_validation_error(
    exc: ValidationError,
    file: Path,
    lines: dict[tuple[str, ...], int],
    prefix: tuple[str, ...] = (),
    model: type[BaseModel] | None = None,
) -> str:
    """The first error of *exc* as one line naming the key, with a hint for the fix."""
    errors = exc.errors(include_url=False)
    # A misspelt key also makes the right one "missing": report the misspelling.
    error = min(errors, key=lambda e: e["type"] != "extra_forbidden")
    loc = tuple(
        str(part) for part in error["loc"] if part != "function-after[_one_source(), ServerEntry]"
    )
    kind = error["type"]
    if kind == "extra_forbidden":
        allowed = _allowed_keys(model or LauncherConfig, loc[:-1])
        message = "unknown key"
        close = difflib.get_close_matches(loc[-1], allowed, n=1)
        if close:
            message += f"; did you mean '{close[0]}'?"
        if allowed:
            message += f" (allowed keys: {', '.join(allowed)})"
    elif kind == "missing":
        message = "required key is missing"
    else:
        message = error["msg"]
        if "input" in error and not isinstance(error["input"], dict | list):
            message += f" (got {error['input']!r})"
    return _format(file, lines, (*prefix, *loc), message)


def _allowed_keys(model: type[BaseModel], loc: tuple[str, ...]) -> list[str]:
    """The field names of the model found at *loc* (mapping keys of dict fields are skipped)."""
    current: Any = model
    skip_next = False
    for part in loc:
        if skip_next:
            skip_next = False
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return []
        info = current.model_fields.get(part)
        if info is None:
            return []
        annotation = info.annotation
        origin = getattr(annotation, "__origin__", None)
        if origin is dict:
            current = annotation.__args__[1]  # type: ignore[union-attr]
            skip_next = True
        else:
            current = annotation
    if isinstance(current, type) and issubclass(current, BaseModel):
        return list(current.model_fields)
    return []
