"""The server registry: registered name -> module, and how to build a server from settings.

A *server module* follows one small contract, which the built-in servers and
third-party packages share:

* ``Settings``: a pydantic model of the server's settings (``extra="forbid"``).
  Relative paths in it resolve against ``info.context["base_dir"]`` when given
  (the launcher passes the config file's folder), else the working directory.
* ``create_server(settings: Settings) -> FastMCP``: builds a fresh server.
* Optional ``ONE_PER_PROCESS = True`` when two instances cannot live in one process.
* Optional ``LOCKS_ITSELF = True``: documents that its state-changing tools take
  :data:`locking.PROCESS_LOCK` themselves when the server runs alone. The launcher
  holds the lock around every tool not annotated ``readOnlyHint`` either way; the
  server's own take then sees the launcher's hold and does not wait again.
* Optional ``check(settings) -> list[(level, text)]``: problems that stop it from
  working ("FAIL") or may surprise ("WARN"); ``--check`` prints them.
* Optional ``EXTRA = "name"``: the pip extra that provides its dependencies.

Where a server comes from, in the launcher config:

* ``server: memory-tools``: a built-in name or one registered by another package
  under the entry-point group ``doc_processing_std_tools.servers`` (the entry
  point's value is a server module, ``pkg.mod``, or an object, ``pkg.mod:attr``);
* ``module: pkg.mod``: any importable server module;
* ``module: pkg.mod:attr``: a FastMCP instance, or a callable that takes the
  settings as keyword arguments and returns one.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastmcp import FastMCP

ENTRY_POINT_GROUP = "doc_processing_std_tools.servers"

BUILTIN_SERVERS: dict[str, str] = {
    "memory-tools": "doc_processing_std_tools.memory",
    "filesystem": "doc_processing_std_tools.filesystem",
    "popoto-memory": "doc_processing_std_tools.popoto_memory",
}

# Import-time failures that mean "install this extra", by top-level module name.
_EXTRA_HINTS: dict[str, str] = {"popoto": "popoto"}


class ServerLoadError(Exception):
    """A server could not be found, imported or built; the message says how to fix it.

    ``extra`` names the pip extra to install when the cause is a missing optional
    dependency; the launcher then skips that server and serves the others.
    """

    def __init__(
        self, message: str, *, extra: str | None = None, config_error: bool = False
    ) -> None:
        super().__init__(message)
        self.extra = extra
        self.config_error = config_error  # the config names something wrong: not a start failure


def missing_extra(label: str, module: str, extra: str) -> ServerLoadError:
    """The error for a server whose optional dependency is not installed."""
    return ServerLoadError(
        f"{label} needs the optional dependency {module!r}: "
        f"pip install 'doc-processing-std-tools[{extra}]'",
        extra=extra,
    )


@dataclass
class ServerSource:
    """A resolved server: where it came from and how to build it."""

    label: str  # what the user wrote: "memory-tools" or "pkg.mod:attr"
    target: ModuleType | Any  # a server module, a FastMCP instance or a factory
    one_per_process: bool = False
    settings_model: Any = None  # pydantic model class, or None

    def validate_settings(self, raw: dict[str, Any], base_dir: Path) -> Any:
        """Validate raw settings; raises pydantic.ValidationError naming the key."""
        if self.settings_model is not None:
            return self.settings_model.model_validate(raw, context={"base_dir": base_dir})
        return dict(raw)

    def build(self, settings: Any) -> FastMCP:
        from fastmcp import FastMCP

        target = self.target
        if isinstance(target, ModuleType):
            try:
                server = target.create_server(settings)
            except ModuleNotFoundError as exc:
                extra = getattr(target, "EXTRA", None)
                if not extra:
                    raise
                raise missing_extra(self.label, (exc.name or "?").split(".")[0], extra) from None
        elif isinstance(target, FastMCP):
            if settings:
                raise ServerLoadError(
                    f"{self.label} is a ready-made server and takes no settings; "
                    "remove 'settings:' or point 'module:' at a factory function"
                )
            server = target
        elif callable(target):
            server = target(**settings)
        else:
            raise ServerLoadError(f"{self.label} is neither a FastMCP server nor a factory")
        if not isinstance(server, FastMCP):
            raise ServerLoadError(
                f"{self.label} returned {type(server).__name__}, expected a FastMCP server"
            )
        return server


def _import(module_name: str, search_dir: Path | None) -> ModuleType:
    import sys

    if search_dir is None or str(search_dir) in sys.path:
        return importlib.import_module(module_name)
    sys.path.insert(0, str(search_dir))
    try:
        return importlib.import_module(module_name)
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(str(search_dir))


def registered_names() -> list[str]:
    """Built-in names plus those registered through entry points."""
    names = set(BUILTIN_SERVERS)
    names.update(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))
    return sorted(names)


def resolve_registered(name: str) -> ServerSource:
    """Find a server by its registered name."""
    if name in BUILTIN_SERVERS:
        return resolve_module(BUILTIN_SERVERS[name], label=name)
    for ep in entry_points(group=ENTRY_POINT_GROUP, name=name):
        return resolve_module(ep.value, label=name)
    import difflib

    names = registered_names()
    close = difflib.get_close_matches(name, names, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise ServerLoadError(
        f"unknown server {name!r}{hint} (registered servers: {', '.join(names)}; "
        "or use 'module: package.module:attribute')",
        config_error=True,
    )


def resolve_module(
    spec: str, *, label: str | None = None, search_dir: Path | None = None
) -> ServerSource:
    """Import ``pkg.mod`` (a server module) or ``pkg.mod:attr`` (an instance or factory).

    *search_dir* (the config file's folder) is importable while the module loads, so
    ``module: notes_server`` finds ``notes_server.py`` next to the config.
    """
    label = label or spec
    module_name, _, attr = spec.partition(":")
    try:
        module = _import(module_name, search_dir)
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").split(".")[0]
        extra = _EXTRA_HINTS.get(missing)
        if extra:
            raise missing_extra(label, missing, extra) from None
        where = f"the config file's folder {search_dir} and " if search_dir else ""
        raise ServerLoadError(
            f"cannot import {module_name!r} for {label}: {exc} "
            f"(searched {where}the installed packages)"
        ) from None
    except Exception as exc:
        raise ServerLoadError(f"importing {module_name!r} for {label} failed: {exc}") from None

    if attr:
        try:
            target: Any = getattr(module, attr)
        except AttributeError:
            raise ServerLoadError(
                f"{module_name!r} has no attribute {attr!r} ({label})", config_error=True
            ) from None
        except Exception as exc:  # a lazy module attribute may fail to build
            raise ServerLoadError(f"loading {spec!r} for {label} failed: {exc}") from None
        if inspect.ismodule(target):
            module, attr, target = target, "", target
        else:
            return ServerSource(label=label, target=target)

    if not hasattr(module, "create_server"):
        raise ServerLoadError(
            f"{module_name!r} is not a server module (it has no create_server); "
            f"use 'module: {module_name}:<attribute>' to name a server object or factory",
            config_error=True,
        )
    return ServerSource(
        label=label,
        target=module,
        one_per_process=bool(getattr(module, "ONE_PER_PROCESS", False)),
        settings_model=getattr(module, "Settings", None),
    )
