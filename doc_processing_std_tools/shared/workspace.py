"""Where the servers may work: the working-directory rule, the per-user data folder,
and the client's MCP roots.

MCP clients start servers from wherever suits them: Claude Desktop from ``/``,
desktop apps from ``$HOME``, ``uvx`` from a cache folder. Such a working
directory must never become a filesystem root or a memory folder, so both
servers ask :func:`unsuitable_reason` before using it.

The client's roots (``roots/list``) are read per session and cached on the
session's connection. The cache is trusted only where :class:`RootsWatch` (a
middleware on the server that receives the client's notifications, i.e. the
one being served) has seen the session initialize: it then drops the cache on
``notifications/roots/list_changed``. Without it the roots are asked for on
every call, which is slower but never stale.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

import platformdirs

from .. import APP_NAME
from ..exceptions import DptError
from ..seams.server_sessions import session_connection

if TYPE_CHECKING:
    pass

__all__ = [
    "APP_NAME",
    "ClientRootsError",
    "client_roots",
    "current_client_roots",
    "is_project_like",
    "paths_from_uris",
    "unsuitable_reason",
    "user_data_dir",
    "writable_reason",
]

ROOTS_TIMEOUT_S = 10.0

log = logging.getLogger(__name__)

# Folders that are never a project, with everything below them.
SYSTEM_FOLDERS = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/proc",
    "/root",
    "/sbin",
    "/sys",
    "/usr",
    "/var",
)
MACOS_SYSTEM_FOLDERS = ("/System", "/Library", "/Applications", "/private")

# Keys in the MCP connection's per-session ``state`` dict.
_WATCHED = "doc_processing_std_tools.roots_watched"
_CACHE = "doc_processing_std_tools.client_roots"
_GENERATION = "doc_processing_std_tools.roots_generation"
_LIST_CHANGED = "notifications/roots/list_changed"


# -- the working-directory rule ---------------------------------------------------


def _forms(path: str | os.PathLike[str]) -> set[Path]:
    """The path as written (made absolute) and fully resolved."""
    given = Path(os.path.abspath(os.path.expanduser(os.fspath(path))))
    return {given, Path(os.path.realpath(given))}


def _homes() -> set[Path]:
    homes: set[Path] = set()
    for home in (os.environ.get("HOME"), os.path.expanduser("~")):
        if home and home != "/":
            homes |= _forms(home)
    try:
        import pwd

        homes |= _forms(pwd.getpwuid(os.getuid()).pw_dir)
    except (ImportError, KeyError, OSError):
        pass
    return {home for home in homes if home != Path("/")}


def _temp_folders() -> set[Path]:
    """The system's temporary folders themselves (a project may live below one)."""
    folders: set[Path] = set()
    for folder in ("/tmp", "/var/tmp", "/dev/shm", os.environ.get("TMPDIR"), tempfile.gettempdir()):
        if folder:
            folders |= _forms(folder)
    return folders


def _cache_folders() -> set[Path]:
    folders = {Path.home() / ".cache"}
    if os.environ.get("XDG_CACHE_HOME"):
        folders.add(Path(os.environ["XDG_CACHE_HOME"]))
    folders.add(Path(platformdirs.user_cache_dir()))
    return {form for folder in folders for form in _forms(folder)}


def _python_folders() -> set[Path]:
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    return {form for prefix in prefixes if prefix for form in _forms(prefix)}


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def unsuitable_reason(path: str | os.PathLike[str], *, platform: str | None = None) -> str | None:
    """Why *path* must not be used as a project folder, or None when it may.

    Refused: ``/``, the user's home folder itself, the temporary folders themselves
    (``/tmp``, ``/var/tmp``, ``$TMPDIR``), system folders (and what is below them, except
    inside the user's home), the Python installation and cache folders. *platform* (``sys.platform`` by default) adds macOS's own.
    """
    forms = _forms(path)
    if Path("/") in forms:
        return "it is the filesystem root"
    homes = _homes()
    if forms & homes:
        return "it is your home folder"
    if forms & _temp_folders():
        return "it is the system's temporary folder"
    under_home = any(_inside(form, home) for form in forms for home in homes)
    system = [Path(folder) for folder in SYSTEM_FOLDERS]
    if (platform or sys.platform) == "darwin":
        system += [Path(folder) for folder in MACOS_SYSTEM_FOLDERS]
    for form in forms:
        if len(form.parts) > 1 and form.parts[1].startswith("lib"):  # /lib, /lib64, ...
            system.append(Path("/", form.parts[1]))
    for folder in system:
        if not under_home and any(_inside(form, folder) for form in forms):
            return f"it is a system folder ({folder})"
    for folder in _python_folders():
        if any(_inside(form, folder) for form in forms):
            return f"it is inside the Python installation ({folder})"
    for folder in _cache_folders():
        if any(_inside(form, folder) for form in forms):
            return f"it is a cache folder ({folder})"
    return None


def is_project_like(path: str | os.PathLike[str]) -> bool:
    """Whether a working directory may stand for "the user's project"."""
    return unsuitable_reason(path) is None


def writable_reason(folder: str | os.PathLike[str]) -> str | None:
    """Why *folder* cannot be created or written, or None when it can (nothing is created).

    An existing folder must be writable; a missing one needs its nearest existing
    ancestor to be a writable folder.
    """
    path = Path(os.path.abspath(os.fspath(folder)))
    if path.exists():
        if not path.is_dir():
            return f"{path} exists and is not a folder"
        if not os.access(path, os.W_OK | os.X_OK):
            return f"{path} is not writable"
        return None
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        return f"{path} cannot be created: {parent} is not a folder"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"{path} cannot be created: {parent} is not writable"
    return None


def user_data_dir() -> Path:
    """The per-user data folder (``$XDG_DATA_HOME/doc-processing-std-tools`` on Linux)."""
    return Path(platformdirs.user_data_dir(APP_NAME))


# -- the client's roots -------------------------------------------------------------


class ClientRootsError(DptError):
    """The client declared roots but they could not be read."""


def paths_from_uris(uris: list[str]) -> list[Path]:
    """Existing local folders named by ``file://`` URIs; anything else is dropped (logged)."""
    paths: list[Path] = []
    for uri in uris:
        parsed = urlparse(uri)
        path = Path(unquote(parsed.path)) if parsed.path else None
        if parsed.scheme != "file" or parsed.netloc not in ("", "localhost") or path is None:
            log.warning("ignoring client root %s: only local file:// folders are used", uri[:200])
            continue
        if not path.is_absolute() or not path.is_dir():
            log.warning("ignoring client root %s: not an existing folder", uri[:200])
            continue
        if path not in paths:
            paths.append(path)
    return paths


def _connection_state(session: Any) -> dict[str, Any] | None:
    """The MCP connection's per-session scratch dict (``seams.session_connection``)."""
    connection = session_connection(session)
    state = getattr(connection, "state", None)
    return state if isinstance(state, dict) else None


def _client_declares_roots(session: Any) -> bool:
    capabilities = getattr(session, "client_capabilities", None)
    return getattr(capabilities, "roots", None) is not None


async def _fetch(session: Any, request_id: Any) -> list[Path]:
    # (here, not at the top: the servers import this module; mcp's types take 0.55 s)
    import mcp_types as types
    from mcp.shared.exceptions import NoBackChannelError
    from mcp.shared.message import ServerMessageMetadata

    # Sent on the calling request's own stream: over HTTP that is the POST's
    # response, which reaches clients that never open the standalone GET stream.
    metadata = ServerMessageMetadata(related_request_id=request_id) if request_id else None
    try:
        result = await session.send_request(
            types.ListRootsRequest(),
            types.ListRootsResult,
            request_read_timeout_seconds=ROOTS_TIMEOUT_S,
            metadata=metadata,
        )
    except NoBackChannelError:
        return []  # a connection that cannot ask (stateless or 2026-07-28 HTTP): no roots
    except Exception as exc:
        raise ClientRootsError(
            f"the client declared roots but did not list them: {type(exc).__name__}: {exc}"[:500]
        ) from None
    return paths_from_uris([str(root.uri) for root in result.roots])


async def client_roots(context: Any) -> list[Path] | None:
    """The client's roots for this session; None when the client declares none.

    *context* is a fastmcp ``Context``. Raises :class:`ClientRootsError` when the
    client declared roots but did not answer ``roots/list``.
    """
    try:
        session = context.session
    except RuntimeError:
        return None
    if not _client_declares_roots(session):
        return None
    state = _connection_state(session)
    watched = bool(state and state.get(_WATCHED))
    if watched and _CACHE in state:  # type: ignore[operator]
        return list(state[_CACHE])  # type: ignore[index]
    generation = state.get(_GENERATION, 0) if state is not None else 0
    request_context = context.request_context
    request_id = getattr(request_context, "request_id", None) if request_context else None
    roots = await _fetch(session, request_id)
    if watched and state is not None and state.get(_GENERATION, 0) == generation:
        state[_CACHE] = roots  # not when list_changed arrived while we asked
    return list(roots)


def current_client_roots() -> list[Path] | None:
    """:func:`client_roots` for the tool call running in this worker thread (None outside one)."""
    # (here, not at the top: fastmcp 0.25 s, anyio.from_thread 35 ms; the servers import this module)
    import anyio.from_thread
    from fastmcp.server.dependencies import get_context

    try:
        context = get_context()
        session = context.session
    except RuntimeError:
        return None
    if not _client_declares_roots(session):
        return None  # no hop to the event loop for clients without roots
    state = _connection_state(session)
    if state is not None and state.get(_WATCHED) and _CACHE in state:
        return list(state[_CACHE])
    try:
        return anyio.from_thread.run(client_roots, context)
    except RuntimeError as exc:
        if "event loop" in str(exc) or "worker thread" in str(exc):
            log.debug("client roots unavailable outside a worker thread: %s", exc)
            return None
        raise
