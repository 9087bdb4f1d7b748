"""Folder chains deeper than any path can name, for tests and benchmarks (one place for both).

Built and removed through descriptors: a chain of thousands of folders has no usable path,
and ``shutil.rmtree`` (pytest's clean-up too) stops on it with RecursionError. Benchmarks
import this module with ``tests/`` put on ``sys.path``, as they do ``rpc_helpers``.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from doc_processing_std_tools.containment import rmtree_at


def make_chain(folder: Path, depth: int, name: str = "d") -> None:
    """*depth* nested folders below *folder*, then ``leaf.txt`` at the bottom."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir(name, dir_fd=fd)
            child = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        os.close(os.open("leaf.txt", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd))
    finally:
        os.close(fd)


def remove_subfolders(folder: Path) -> None:
    """Remove every folder directly in *folder*, at any depth below (files at the top stay)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in os.listdir(fd):
            if stat.S_ISDIR(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                rmtree_at(fd, name)
    finally:
        os.close(fd)
