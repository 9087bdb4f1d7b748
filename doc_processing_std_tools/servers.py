"""The server contract (:class:`ServerSpec`) and how the launcher finds a server.

Every mountable server, built-in or third-party, is described by one
:class:`ServerSpec`: its settings model, a factory, optional ``check`` and
``describe`` hooks, and three facts the launcher needs (one instance per process,
locks itself, the pip extra holding its optional dependencies).

Where a server comes from, in the launcher config:

* ``server: memory-tools``: a name registered under the entry-point group
  ``doc_processing_std_tools.servers``. The built-in servers register there like any
  third-party package (see this project's ``pyproject.toml``); the entry point names
  a ``ServerSpec`` (``pkg.mod:SPEC``) or a server module (``pkg.mod``).
* ``module: pkg.mod``: a module with a ``SPEC``, or one with ``Settings`` and
  ``create_server(settings)`` (plus optional ``check``, ``describe``,
  ``ONE_PER_PROCESS``, ``LOCKS_ITSELF``, ``EXTRA``).
* ``module: pkg.mod:attr``: a ``ServerSpec``, a FastMCP instance, or a factory.
  A factory's keyword parameters are its settings: they are validated like a server
  module's (unknown keys refused, types checked, :data:`~.settings.ConfigPath`
  resolved against the config file's folder), with errors naming the key.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from importlib.metadata import PackageNotFoundError, distribution, entry_points
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from pydantic import ConfigDict, create_model

from .exceptions import DptError
from .settings import ServerSettings
from .shared.install_hint import install_extra

if TYPE_CHECKING:
    from fastmcp import FastMCP
    from pydantic import BaseModel

ENTRY_POINT_GROUP = "doc_processing_std_tools.servers"
DISTRIBUTION = "doc-processing-std-tools"

Findings = list[tuple[str, str]]  # (level or label, text)

# The levels of a ``check(settings)`` finding. They say who must act, and so what the launcher does:
FAIL = "FAIL"  # the config is wrong (a bad value): serving refuses it, exit 2
UNAVAILABLE = "UNAVAILABLE"  # this machine lacks something (a binary, an extra, a folder it may
# write): the server is skipped with the reason and the fix; ``--check`` shows it as FAIL
WARN = "WARN"  # it serves, but probably not as meant


class ServerLoadError(DptError):
    """A server could not be found, imported or built; the message says how to fix it.

    Args:
        message: The one-line message, naming the fix.
        extra: The pip extra to install when the cause is a missing optional dependency;
            the launcher then skips that server and serves the others.
        config_error: The config names something wrong (an unknown server, a missing
            attribute), rather than the server failing to start.
    """

    def __init__(
        self, message: str, *, extra: str | None = None, config_error: bool = False
    ) -> None:
        super().__init__(message)
        self.extra = extra
        self.config_error = config_error  # the config names something wrong: not a start failure


class ServerUnavailable(ServerLoadError):
    """A server cannot start on this machine, although its config is right (no ``redis-server``,
    a missing optional dependency): the launcher skips it with the message, which names the fix,
    unless it is ``required`` (or ``--strict``)."""


def missing_extra(label: str, module: str, extra: str) -> ServerLoadError:
    """The error for a server whose optional dependency is not installed.

    Args:
        label: The server's name in messages (its mount or registered name).
        module: The top-level module that failed to import.
        extra: The pip extra that installs it.

    Returns:
        A :class:`ServerUnavailable` naming the ``pip install`` that fixes it.
    """
    return ServerUnavailable(
        f"{label} needs the optional dependency {module!r}: {install_extra(extra)}",
        extra=extra,
    )


@dataclass(frozen=True)
class ServerSpec:
    """What a server offers the launcher: the one contract every server follows.

    * ``create(settings)`` builds a fresh FastMCP server from validated settings.
    * ``settings``: the pydantic model of its settings (``None``: the raw mapping is passed).
    * ``check(settings)``: ``(level, text)`` problems; ``--check`` prints them. ``FAIL``: the
      config is wrong (the launch stops, exit 2); ``UNAVAILABLE``: this machine lacks
      something the server needs (it is skipped with the text, which names the fix);
      ``WARN``: it serves anyway.
    * ``describe(settings)``: ``(label, value)`` rows ``--check`` shows (where data lives).
    * ``one_per_process``: two instances cannot live in one process (one global connection).
    * ``locks_itself``: its state-changing tools take :data:`~.locking.PROCESS_LOCK`
      themselves, around their disk work only. Under the launcher with ``lock: auto`` the
      launcher holds nothing for them and only admits them (``locking.admit_self_locking``);
      with ``lock: always`` it holds the lock for the whole call and their own take reuses it.
    * ``extra``: the pip extra with its optional dependencies; a ``ModuleNotFoundError``
      while building then becomes "pip install 'doc-processing-std-tools[extra]'", and
      the launcher skips the server instead of failing.
    """

    name: str
    create: Callable[[Any], FastMCP]
    settings: type[BaseModel] | None = None
    check: Callable[[Any], Findings] | None = None
    describe: Callable[[Any], Findings] | None = None
    one_per_process: bool = False
    locks_itself: bool = False
    extra: str | None = None

    def validate_settings(self, raw: dict[str, Any], base_dir: Path) -> Any:
        """Validate the raw ``settings:`` mapping of a launcher config entry.

        Args:
            raw: The entry's settings, as read from the config.
            base_dir: The folder relative :data:`~.settings.ConfigPath` settings resolve
                against (the config file's folder).

        Returns:
            An instance of :attr:`settings`, or a copy of *raw* when the spec has no model.

        Raises:
            pydantic.ValidationError: A key is unknown or a value is wrong; the error names it.
        """
        if self.settings is None:
            return dict(raw)
        return self.settings.model_validate(raw, context={"base_dir": base_dir})

    def build(self, settings: Any) -> FastMCP:
        """Build a fresh server from validated settings.

        Args:
            settings: What :meth:`validate_settings` returned.

        Returns:
            A new FastMCP server.

        Raises:
            ServerUnavailable: An optional dependency is missing; the message names the extra.
            ServerLoadError: ``create`` returned something other than a FastMCP server.
        """
        # (here, not at the top: resolving a server must not load fastmcp, 0.25 s)
        from fastmcp import FastMCP

        try:
            server = self.create(settings)
        except ModuleNotFoundError as exc:
            if not self.extra:
                raise
            raise missing_extra(self.name, (exc.name or "?").split(".")[0], self.extra) from None
        if not isinstance(server, FastMCP):
            raise ServerLoadError(
                f"{self.name} returned {type(server).__name__}, expected a FastMCP server"
            )
        return server

    def findings(self, settings: Any) -> Findings:
        """The ``check`` hook's ``(level, text)`` findings for *settings* (none without a hook).

        Args:
            settings: Validated settings.

        Returns:
            The findings, levels :data:`FAIL`, :data:`UNAVAILABLE` or :data:`WARN`.
        """
        return list(self.check(settings)) if self.check else []

    def rows(self, settings: Any) -> Findings:
        """The ``describe`` hook's ``(label, value)`` rows for *settings* (none without a hook).

        Args:
            settings: Validated settings.

        Returns:
            The rows ``dpt-launch --check`` shows, e.g. where the server keeps its data.
        """
        return list(self.describe(settings)) if self.describe else []


def spec_from_module(module: ModuleType, label: str) -> ServerSpec:
    """The spec of a server module: its ``SPEC``, or one read from its attributes.

    Args:
        module: A module with a ``SPEC``, or with ``create_server`` (and optionally
            ``Settings``, ``check``, ``describe``, ``ONE_PER_PROCESS``, ``LOCKS_ITSELF``,
            ``EXTRA``).
        label: The name the spec takes (the mount or registered name).

    Returns:
        The module's spec, named *label*.

    Raises:
        ServerLoadError: The module has neither ``SPEC`` nor ``create_server``.
    """
    spec = getattr(module, "SPEC", None)
    if isinstance(spec, ServerSpec):
        return replace(spec, name=label)
    if not callable(getattr(module, "create_server", None)):
        raise ServerLoadError(
            f"{module.__name__!r} is not a server module (it has no SPEC or create_server); "
            f"use 'module: {module.__name__}:<attribute>' to name a server object or factory",
            config_error=True,
        )
    return ServerSpec(
        name=label,
        create=module.create_server,
        settings=getattr(module, "Settings", None),
        check=getattr(module, "check", None),
        describe=getattr(module, "describe", None),
        one_per_process=bool(getattr(module, "ONE_PER_PROCESS", False)),
        locks_itself=bool(getattr(module, "LOCKS_ITSELF", False)),
        extra=getattr(module, "EXTRA", None),
    )


class _OpenSettings(ServerSettings):
    """A factory's settings when it takes ``**kwargs``: keys beyond its parameters pass through."""

    model_config = ConfigDict(**{**ServerSettings.model_config, "extra": "allow"})


class NoSettings(ServerSettings):
    """A ready-made server takes no settings: any key is refused."""


def spec_from_factory(factory: Callable[..., FastMCP], label: str) -> ServerSpec:
    """A spec whose settings are *factory*'s keyword parameters, validated by pydantic.

    Args:
        factory: A callable returning a FastMCP server. Its annotated parameters become
            typed settings (unannotated ones accept anything, parameters without a default
            are required); with ``**kwargs`` other keys pass through.
        label: The name the spec takes.

    Returns:
        A spec whose ``create`` calls *factory* with the validated settings.
    """
    try:
        hints = inspect.get_annotations(factory, eval_str=True)
    except Exception:  # unresolvable annotations: validate names only
        hints = {}
    fields: dict[str, Any] = {}
    takes_more = False
    for param in inspect.signature(factory).parameters.values():
        if param.kind is param.VAR_KEYWORD:
            takes_more = True
        elif param.kind in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
            default = ... if param.default is param.empty else param.default
            fields[param.name] = (hints.get(param.name, Any), default)
    # **kwargs: keys beyond the named parameters pass through
    base = _OpenSettings if takes_more else ServerSettings
    model = create_model(
        f"{getattr(factory, '__name__', 'factory')}_settings", __base__=base, **fields
    )
    names = tuple(fields)

    def create(settings: Any) -> FastMCP:
        kwargs = {name: getattr(settings, name) for name in names}
        kwargs.update(settings.model_extra or {})
        return factory(**kwargs)

    return ServerSpec(name=label, create=create, settings=model)


def spec_from_object(target: Any, label: str) -> ServerSpec:
    """The spec for what ``module: pkg.mod:attr`` names.

    Args:
        target: A :class:`ServerSpec`, a module, a FastMCP server or a factory.
        label: The name the spec takes.

    Returns:
        The spec, named *label*; a FastMCP instance gets one that refuses every setting.

    Raises:
        ServerLoadError: *target* is none of these.
    """
    # (here, not at the top: resolving a server must not load fastmcp, 0.25 s)
    from fastmcp import FastMCP

    if isinstance(target, ServerSpec):
        return replace(target, name=label)
    if isinstance(target, ModuleType):
        return spec_from_module(target, label)
    if isinstance(target, FastMCP):
        return ServerSpec(name=label, create=lambda _settings: target, settings=NoSettings)
    if callable(target):
        return spec_from_factory(target, label)
    raise ServerLoadError(
        f"{label} is neither a server spec, a FastMCP server nor a factory", config_error=True
    )


def _import(module_name: str, search_dir: Path | None) -> ModuleType:
    if search_dir is None or str(search_dir) in sys.path:
        return importlib.import_module(module_name)
    sys.path.insert(0, str(search_dir))
    try:
        return importlib.import_module(module_name)
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(str(search_dir))


def _registered() -> dict[str, str]:
    """Registered name -> entry-point value; this package's own entry points first
    (one metadata file, so the built-ins cost no scan of every installed package)."""
    found: dict[str, str] = {}
    with contextlib.suppress(PackageNotFoundError):
        for ep in distribution(DISTRIBUTION).entry_points.select(group=ENTRY_POINT_GROUP):
            found[ep.name] = ep.value
    return found


def registered_names() -> list[str]:
    """Every name ``server:`` accepts: this package's servers and other packages'.

    Returns:
        The names registered under :data:`ENTRY_POINT_GROUP`, sorted.
    """
    names = set(_registered())
    names.update(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))
    return sorted(names)


def resolve_registered(name: str) -> ServerSpec:
    """The spec of the server registered as *name* (``server: NAME`` in a launcher config).

    Args:
        name: A registered name, e.g. ``memory-tools``.

    Returns:
        The server's spec, named *name*.

    Raises:
        ServerLoadError: No server is registered as *name* (the message suggests a close
            name and lists the registered ones), or its module cannot be imported.
    """
    value = _registered().get(name)
    if value is None:
        for ep in entry_points(group=ENTRY_POINT_GROUP, name=name):
            value = ep.value
            break
    if value is not None:
        return resolve_module(value, label=name)
    names = registered_names()
    close = difflib.get_close_matches(name, names, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    listed = ", ".join(names) or "none: reinstall doc-processing-std-tools"
    raise ServerLoadError(
        f"unknown server {name!r}{hint} (registered servers: {listed}; "
        "or use 'module: package.module:attribute')",
        config_error=True,
    )


def resolve_module(
    spec: str, *, label: str | None = None, search_dir: Path | None = None
) -> ServerSpec:
    """Import ``pkg.mod`` (a server module) or ``pkg.mod:attr`` (a spec, instance or factory).

    Args:
        spec: ``pkg.mod`` or ``pkg.mod:attr``, as ``module:`` in a launcher config.
        label: The name the spec takes; *spec* itself when not given.
        search_dir: The config file's folder: importable while the module loads, so
            ``module: notes_server`` finds ``notes_server.py`` next to the config.

    Returns:
        The spec of the module (:func:`spec_from_module`) or of the attribute
        (:func:`spec_from_object`), named *label*.

    Raises:
        ServerLoadError: The module cannot be imported, has no such attribute, or names
            no server; the message says which.
    """
    label = label or spec
    module_name, _, attr = spec.partition(":")
    try:
        module = _import(module_name, search_dir)
    except ModuleNotFoundError as exc:
        where = f"the config file's folder {search_dir} and " if search_dir else ""
        raise ServerLoadError(
            f"cannot import {module_name!r} for {label}: {exc} "
            f"(searched {where}the installed packages)"
        ) from None
    except Exception as exc:
        raise ServerLoadError(f"importing {module_name!r} for {label} failed: {exc}") from None
    if not attr:
        return spec_from_module(module, label)
    try:
        target = getattr(module, attr)
    except AttributeError:
        raise ServerLoadError(
            f"{module_name!r} has no attribute {attr!r} ({label})", config_error=True
        ) from None
    except Exception as exc:  # a lazy module attribute may fail to build
        raise ServerLoadError(f"loading {spec!r} for {label} failed: {exc}") from None
    return spec_from_object(target, label)
