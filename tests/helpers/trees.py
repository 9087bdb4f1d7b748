"""Folder trees for tests and benchmarks (one place for both): a snapshot of everything under a
folder (to show that a refused call changed nothing), chains deeper than any path can name,
and a folder swapped for an outside symlink over and over (the containment race).

Chains are built and removed through descriptors: a chain of thousands of folders has no
usable path, and ``shutil.rmtree`` (pytest's clean-up too) stops on it with RecursionError.
"""

from __future__ import annotations

import ctypes
import os
import stat
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from doc_processing_std_tools.containment import rmtree_at


def snapshot(base: Path, skip: tuple[Path, ...] = ()) -> dict[str, tuple]:
    """Everything under *base* except the *skip* subtrees: type, content or link, mode."""
    state: dict[str, tuple] = {}
    for folder, dirs, files in os.walk(base):
        here = Path(folder)
        dirs[:] = [d for d in dirs if here / d not in skip]
        for name in [*dirs, *files]:
            path = here / name
            if path in skip:
                continue
            info = os.lstat(path)
            if stat.S_ISLNK(info.st_mode):
                state[str(path)] = ("link", os.readlink(path))
            elif stat.S_ISDIR(info.st_mode):
                state[str(path)] = ("dir", stat.S_IMODE(info.st_mode))
            else:
                state[str(path)] = ("file", path.read_bytes(), stat.S_IMODE(info.st_mode))
    return state


def exchange(a: Path, b: Path) -> None:
    """Atomically swap two names (renameat2 RENAME_EXCHANGE); fall back to two renames."""
    func = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if func is not None and func(-100, os.fsencode(a), -100, os.fsencode(b), 2) == 0:
        return
    spare = a.with_name(a.name + ".spare")
    os.rename(a, spare)
    os.rename(b, a)
    os.rename(spare, b)


def make_chain(
    folder: Path, depth: int, name: str = "d", leaf: str = "leaf.txt", leaf_age: float = 0.0
) -> None:
    """*depth* nested folders below *folder*, then the file *leaf* at the bottom, last
    modified *leaf_age* seconds ago."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir(name, dir_fd=fd)
            child = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        os.close(os.open(leaf, os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd))
        if leaf_age:
            then = time.time() - leaf_age
            os.utime(leaf, (then, then), dir_fd=fd)
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


def swap_pair(root: Path, outside: Path, inside_text: str, outside_text: str) -> tuple[Path, Path]:
    """The two names a swap race exchanges: the folder ``root/swap`` and ``root/swap_link``,
    a symlink to ``outside/target``; each holds an ``e.txt`` with the given text."""
    (root / "swap").mkdir()
    (root / "swap" / "e.txt").write_text(inside_text)
    (outside / "target").mkdir()
    (outside / "target" / "e.txt").write_text(outside_text)
    os.symlink(outside / "target", root / "swap_link")
    return root / "swap", root / "swap_link"


@contextmanager
def swapping(a: Path, b: Path) -> Iterator[list[int]]:
    """Exchange *a* and *b* atomically, over and over in a thread, until the block ends;
    yields a one-item list counting the swaps done."""
    stop = threading.Event()
    swaps = [0]

    def swapper() -> None:
        while not stop.is_set():
            exchange(a, b)
            swaps[0] += 1

    thread = threading.Thread(target=swapper)
    thread.start()
    try:
        yield swaps
    finally:
        stop.set()
        thread.join()
