"""A home folder of the test run's own, and a check that the real one was left alone.

The run's processes (pytest, its xdist workers, every launcher and server they spawn) get
``HOME`` and each per-user folder pointed into one temp folder (:func:`private_home_environment`,
set by ``tests/conftest.py`` before any of them starts). :class:`HomeGuard` records, at the
start, what the package and its dependencies would write in the real per-user folders, and
lists at the end what changed there.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from doc_processing_std_tools import APP_NAME

# What the package and its dependencies keep per user, below the real home and XDG folders:
# (the XDG variable, its default below the home folder, the entry this project's code writes)
_PER_USER = (
    ("XDG_DATA_HOME", ".local/share", APP_NAME),  # memory-tools, popoto's store, OAuth tokens
    ("XDG_DATA_HOME", ".local/share", "python_keyring"),  # keyrings.alt's file backends
    ("XDG_CACHE_HOME", ".cache", APP_NAME),  # memory-tools' search indexes, the lock registry
    ("XDG_CONFIG_HOME", ".config", APP_NAME),
    ("XDG_CONFIG_HOME", ".config", "python_keyring"),  # keyring's own settings
    ("XDG_STATE_HOME", ".local/state", APP_NAME),
)


def private_home_environment(home: Path) -> dict[str, str]:
    """Environment variables that point every per-user folder into *home* (created here)."""
    folders = {
        "HOME": home,
        "XDG_DATA_HOME": home / ".local" / "share",
        "XDG_CACHE_HOME": home / ".cache",
        "XDG_CONFIG_HOME": home / ".config",
        "XDG_STATE_HOME": home / ".local" / "state",
        "XDG_RUNTIME_DIR": home / "run",  # (the launchers' registry of locked folders)
    }
    for folder in folders.values():
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return {
        # (popoto writes the errors it swallows to ~/.popoto/memory.log: popoto.integrations.
        # config reads POPOTO_MEMORY_LOG, which tests that clear POPOTO_* would clear; HOME stays)
        **{name: str(folder) for name, folder in folders.items()},
        # no OS keyring (a desktop's Secret Service would hold test logins): the token store
        # falls back to its files, under XDG_DATA_HOME (launcher/external/tokens.py)
        "PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring",
    }


class HomeGuard:
    """What a run could change in the real per-user folders of *home*: every file below the
    folders this project and its dependencies write (``~/.popoto``, ``APP_NAME`` in each XDG
    folder, keyring files, the runtime folder's), and which entries the home folder and its
    XDG folders hold (a new one is flagged; other programs' changes inside them are not)."""

    def __init__(self, home: Path) -> None:
        self.home = home
        xdg = {name: Path(os.environ.get(name) or home / default) for name, default, _ in _PER_USER}
        runtime = os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{os.getuid()}"
        self.trees = [
            home / ".popoto",
            Path(runtime) / APP_NAME,
            *(xdg[name] / entry for name, _, entry in _PER_USER),
        ]
        self.listed = [home, *dict.fromkeys(xdg.values())]
        self.before = self._state()

    def changes(self) -> list[str]:
        """One line per path created, removed or changed since the guard was made."""
        after = self._state()
        return [
            f"{'created' if path not in self.before else 'removed' if path not in after else 'changed'}"
            f" {path}"
            for path in sorted(set(self.before) | set(after))
            if self.before.get(path) != after.get(path)
        ]

    def _state(self) -> dict[str, tuple[object, ...]]:
        state: dict[str, tuple[object, ...]] = {}
        for folder in self.listed:
            try:
                names = os.listdir(folder)
            except OSError:
                continue
            for name in names:
                state[str(folder / name)] = ("entry",)
        for tree in self.trees:
            for folder, dirs, files in os.walk(tree):
                for name in [*dirs, *files]:
                    path = os.path.join(folder, name)
                    try:
                        info = os.lstat(path)
                    except OSError:
                        continue
                    kind = "dir" if stat.S_ISDIR(info.st_mode) else "file"
                    size = 0 if kind == "dir" else info.st_size
                    state[path] = (kind, size, info.st_mtime_ns)
        return state
