"""What every part of containment agrees on: how a descriptor is opened (never following a
symlink, never blocking), the names the servers reserve, and how long a path may be."""

from __future__ import annotations

import os

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO swapped in for a file cannot block the open (regular files ignore it).
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
TEMP_PREFIX = ".dpt-tmp-"
# Names the servers keep for themselves (".dpt.lock", ".dpt-tmp-*"): never listed.
RESERVED_PREFIX = ".dpt"
# A temp file no writer holds an flock on is a dead writer's litter once it is this old
# (the age covers the instant between creating a temp file and locking it).
STALE_TEMP_SECONDS = 5.0
# PATH_MAX. A longer path could only be a very deep chain of folders (names are
# at most 255 bytes); refusing it bounds how deep one call can create.
MAX_PATH_CHARS = 4096
# A path argument longer than this is refused before it is even split (``..`` and ``.``
# parts can make a usable path longer than MAX_PATH_CHARS, but not this long).
MAX_PATH_ARGUMENT_CHARS = 4 * MAX_PATH_CHARS
