"""Race-free path containment: every path is walked component by component through
directory file descriptors, so nothing can lead a read or a write outside the roots.

Why not ``realpath`` then ``open``: between the check and the use, a folder can be
swapped for a symlink (the reference filesystem server's tests admit this race).
Here each component is opened relative to the already-opened parent with
``O_NOFOLLOW``; a symlink met on the way is read and its target walked the same
way, and refused when it leads outside every root. ``..`` pops back to the parent
descriptor we came from and can never climb above a root. The last component is
used through its parent's descriptor (``dir_fd=``), never by a path string.

A :class:`Jail` holds one or more roots. Symlinks between roots are allowed.
Known limit: a folder *moved* out of a root by another program while we hold
its descriptor is still reachable through that descriptor for the rest of that
one call.

Where each part lives: ``resolve`` (parsing a path and the descriptor walk),
``jail`` (the file operations), ``walks`` (listing, walking, deleting and sweeping trees),
``temps`` (atomic writes and dead writers' temp files), ``errors`` (the refusals),
``conventions`` (open flags, reserved names, path limits). Import from this package.
"""

from __future__ import annotations

from .conventions import (
    MAX_PATH_ARGUMENT_CHARS,
    MAX_PATH_CHARS,
    RESERVED_PREFIX,
    STALE_TEMP_SECONDS,
    TEMP_PREFIX,
)
from .errors import ContainmentError, FileTooLarge, ReservedName, RootChangeRefused
from .jail import Jail
from .resolve import Target
from .temps import atomic_write_at, remove_if_stale, rename_noreplace
from .walks import Entry, rmtree_at, sweep_stale_temps, walk_fd

__all__ = [
    "MAX_PATH_ARGUMENT_CHARS",
    "MAX_PATH_CHARS",
    "RESERVED_PREFIX",
    "STALE_TEMP_SECONDS",
    "TEMP_PREFIX",
    "ContainmentError",
    "Entry",
    "FileTooLarge",
    "Jail",
    "ReservedName",
    "RootChangeRefused",
    "Target",
    "atomic_write_at",
    "remove_if_stale",
    "rename_noreplace",
    "rmtree_at",
    "sweep_stale_temps",
    "walk_fd",
]
