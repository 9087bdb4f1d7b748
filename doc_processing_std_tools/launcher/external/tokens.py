"""Upstream OAuth logins, one per (server, user): the OS keyring where there is one, else a file.

A login is a JSON record (the server's URL, the tokens, the client registration, when the
access token expires, the discovered metadata) kept under the mount name and the user
(``None``: the launcher's own login, what ``dpt-launch login NAME`` fills). Without a usable
keyring (none installed, or no backend, as on a headless Linux box) each record is a file
of mode 0600 in ``<per-user data folder>/oauth`` (a folder of mode 0700).
``DPTTOOLS_TOKEN_STORE=file`` or ``keyring`` forces the choice.

Beside each record a *stamp* file (no secret in it) changes on every write, so a running
launcher notices a new login cheaply without reading the keyring every second. The last
tool list a server gave is kept there too (``*.tools.json``): a server that needs a login
keeps its tools listed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from ...exceptions import DptError
from ...shared.install_hint import install_extra
from ...shared.workspace import user_data_dir

SERVICE = "dpt-launch"  # the keyring's service name


class TokenStoreError(DptError):
    """The store cannot be read or written; the message says which and why (never a token)."""


def _key(server: str, user: str | None) -> str:
    return server if user is None else f"{server} user={user}"


def _keyring() -> Any | None:
    """The keyring module when it has a real backend (not ``fail`` or ``null``), else None."""
    choice = os.environ.get("DPTTOOLS_TOKEN_STORE", "auto").strip().lower()
    if choice == "file":
        return None
    try:
        # (here, not at the top: the oauth extra, optional, and 0.11 s to import)
        import keyring
    except ImportError:
        if choice == "keyring":
            raise TokenStoreError(
                "DPTTOOLS_TOKEN_STORE=keyring, but the keyring package is not installed "
                f"({install_extra('oauth')})"
            ) from None
        return None
    if choice == "keyring" or keyring.get_keyring().priority > 0:
        return keyring
    return None


def default_folder() -> Path:
    return user_data_dir() / "oauth"


class TokenStore:
    """Logins by (server, user). ``get``/``put``/``delete`` block (a keyring may ask D-Bus):
    call them from a worker thread in async code."""

    def __init__(self, folder: Path | None = None, *, keyring: Any | None = ...) -> None:
        self.folder = folder if folder is not None else default_folder()
        self._keyring = _keyring() if keyring is ... else keyring

    @property
    def where(self) -> str:
        """Where the secrets live, for messages."""
        if self._keyring is not None:
            return f"the OS keyring ({type(self._keyring.get_keyring()).__name__})"
        return f"files of mode 0600 in {self.folder}"

    def _path(self, key: str, suffix: str) -> Path:
        digest = hashlib.sha256(key.encode()).hexdigest()[:32]
        return self.folder / f"{digest}{suffix}"

    def _ensure_folder(self) -> None:
        try:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise TokenStoreError(
                f"cannot create the token folder {self.folder}: {exc.strerror}"
            ) from None

    def get(self, server: str, user: str | None = None) -> dict[str, Any] | None:
        """The login of *user* (None: the launcher's own) at *server*, or None."""
        key = _key(server, user)
        try:
            if self._keyring is not None:
                text = self._keyring.get_password(SERVICE, key)
            else:
                path = self._path(key, ".json")
                if not path.exists():
                    return None
                if path.stat().st_mode & 0o077:
                    path.chmod(0o600)
                text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise TokenStoreError(f"cannot read the login of {server!r}: {exc.strerror}") from None
        except Exception as exc:  # a keyring backend's own error
            raise TokenStoreError(
                f"cannot read the login of {server!r} from {self.where}: {type(exc).__name__}"
            ) from None
        if not text:
            return None
        try:
            record = json.loads(text)
        except ValueError:
            return None  # a damaged record is no login: `dpt-launch login` writes a new one
        return record if isinstance(record, dict) else None

    def put(self, server: str, tokens: dict[str, Any], user: str | None = None) -> str:
        """Keep *tokens* (the whole login record) for *user* at *server*. Returns the
        :meth:`stamp` this write left, so the writer can tell its own write from another's."""
        key = _key(server, user)
        text = json.dumps(tokens, separators=(",", ":"))
        try:
            if self._keyring is not None:
                self._keyring.set_password(SERVICE, key, text)
            else:
                self._ensure_folder()
                self._write(self._path(key, ".json"), text)
        except OSError as exc:
            raise TokenStoreError(f"cannot keep the login of {server!r}: {exc.strerror}") from None
        except TokenStoreError:
            raise
        except Exception as exc:
            raise TokenStoreError(
                f"cannot keep the login of {server!r} in {self.where}: {type(exc).__name__}"
            ) from None
        return self._touch(key)

    def delete(self, server: str, user: str | None = None) -> bool:
        """Forget the login; whether there was one."""
        key = _key(server, user)
        had = False
        try:
            if self._keyring is not None:
                with contextlib.suppress(Exception):  # (PasswordDeleteError: there was none)
                    had = self._keyring.get_password(SERVICE, key) is not None
                    self._keyring.delete_password(SERVICE, key)
            else:
                path = self._path(key, ".json")
                had = path.exists()
                path.unlink(missing_ok=True)
        except OSError as exc:
            raise TokenStoreError(
                f"cannot remove the login of {server!r}: {exc.strerror}"
            ) from None
        self._touch(key)
        return had

    def stamp(self, server: str, user: str | None = None) -> str:
        """Changes whenever the login of (*server*, *user*) is written or removed."""
        try:
            return self._path(_key(server, user), ".changed").read_text(encoding="utf-8")
        except OSError:
            return ""

    def _touch(self, key: str) -> str:
        stamp = f"{time.time_ns()}-{os.getpid()}"
        try:
            self._ensure_folder()
            self._write(self._path(key, ".changed"), stamp)
        except OSError:
            return ""
        return stamp

    def save_tools(self, server: str, tools: list[dict[str, Any]]) -> None:
        """Keep the tool list *server* gave last (what a server that needs a login lists)."""
        with contextlib.suppress(OSError, TokenStoreError):
            self._ensure_folder()
            self._write(self._path(server, ".tools.json"), json.dumps(tools))

    def load_tools(self, server: str) -> list[dict[str, Any]]:
        try:
            tools = json.loads(self._path(server, ".tools.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return []
        return [tool for tool in tools if isinstance(tool, dict)] if isinstance(tools, list) else []

    @staticmethod
    def _write(path: Path, text: str) -> None:
        """Replace *path* whole (a reader never sees half a record), created with mode 0600."""
        temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as file:
                file.write(text)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                temp.unlink()
            raise
