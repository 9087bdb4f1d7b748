"""Unit tests of containment.Jail: parsing, resolution, operations, and the swap race."""

from __future__ import annotations

import errno
import os
import stat
import time
from pathlib import Path

import pytest

from doc_processing_std_tools.containment import (
    TEMP_PREFIX,
    ContainmentError,
    FileTooLarge,
    Jail,
    RootChangeRefused,
)
from helpers.trees import make_chain, snapshot, swap_pair, swapping

SECRET = "TOP-SECRET-5f3a"


@pytest.fixture
def world(tmp_path: Path) -> dict[str, Path]:
    root = tmp_path / "root"
    root2 = tmp_path / "root2"
    evil = tmp_path / "root-evil"
    out = tmp_path / "outside"
    for folder in (root / "sub", root2, evil, out / "inner"):
        folder.mkdir(parents=True)
    (root / "a.txt").write_text("hello\n")
    (root2 / "b.txt").write_text("from root2\n")
    (evil / "secret.txt").write_text(SECRET)
    (out / "secret.txt").write_text(SECRET)
    (out / "inner" / "secret.txt").write_text(SECRET)
    os.symlink(out / "secret.txt", root / "file_out")
    os.symlink(out, root / "dir_out")
    os.symlink("../outside", root / "rel_out")
    os.symlink("../root2", root / "rel_root2")
    os.symlink(root2 / "b.txt", root / "abs_root2")
    os.symlink("a.txt", root / "inside_link")
    os.symlink(root / "nothere.txt", root / "dangling_in")
    os.symlink(out / "missing.txt", root / "dangling_out")
    os.symlink("chain2", root / "chain1")
    os.symlink(out, root / "chain2")
    os.symlink("loop2", root / "loop1")
    os.symlink("loop1", root / "loop2")
    return {"base": tmp_path, "root": root, "root2": root2, "evil": evil, "out": out}


@pytest.fixture
def jail(world: dict[str, Path]) -> Jail:
    return Jail([world["root"], world["root2"]])


def outside_state(world: dict[str, Path]) -> dict[str, tuple]:
    return snapshot(world["base"], skip=(world["root"], world["root2"]))


# -- parsing -------------------------------------------------------------------


def test_needs_a_root_and_roots_must_be_folders(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        Jail([])
    with pytest.raises(NotADirectoryError):
        Jail([tmp_path / "missing"])


def test_locate_compares_whole_components(jail: Jail, world: dict[str, Path]) -> None:
    assert jail.locate("x/y") == (0, ["x", "y"])
    assert jail.locate(f"{world['root2']}/b.txt") == (1, ["b.txt"])
    with pytest.raises(ContainmentError) as info:
        jail.locate(f"{world['evil']}/secret.txt")
    assert "outside allowed directories" in str(info.value)
    assert str(world["root"]) in str(info.value)


def test_locate_refuses_nul_bytes(jail: Jail) -> None:
    with pytest.raises(ValueError, match="NUL"):
        jail.locate("a.txt\x00.png")


def test_double_leading_slash_is_an_ordinary_absolute_path(
    jail: Jail, world: dict[str, Path]
) -> None:
    assert jail.locate("/" + str(world["root"]) + "/a.txt") == (0, ["a.txt"])
    with pytest.raises(ContainmentError):
        jail.locate("/" + str(world["out"]) + "/secret.txt")


def test_root_given_through_a_symlink_is_accepted_in_both_spellings(
    world: dict[str, Path],
) -> None:
    alias = world["base"] / "alias"
    os.symlink(world["root"], alias)
    jail = Jail([alias])
    assert jail.roots == (world["root"],)
    assert jail.read_bytes(f"{alias}/a.txt") == b"hello\n"
    assert jail.read_bytes(f"{world['root']}/a.txt") == b"hello\n"


# -- resolution ----------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "../outside/secret.txt",
        "sub/../../outside/secret.txt",
        "file_out",
        "dir_out/secret.txt",
        "dir_out/inner/secret.txt",
        "rel_out/secret.txt",
        "chain1/secret.txt",
        "dangling_out",
        "{root}/../outside/secret.txt",
        "{root2}/../root-evil/secret.txt",
        "{out}/secret.txt",
    ],
)
def test_resolve_refuses_escapes(jail: Jail, world: dict[str, Path], path: str) -> None:
    path = path.format(root=world["root"], root2=world["root2"], out=world["out"])
    with pytest.raises(ContainmentError), jail.resolve(path):
        pass
    with pytest.raises(ContainmentError):
        jail.realpath(path)


def test_symlinks_inside_and_between_roots_are_followed(jail: Jail, world: dict[str, Path]) -> None:
    assert jail.read_bytes("inside_link") == b"hello\n"
    assert jail.read_bytes("abs_root2") == b"from root2\n"
    assert jail.read_bytes("rel_root2/b.txt") == b"from root2\n"
    assert jail.realpath("rel_root2/b.txt") == world["root2"] / "b.txt"
    assert jail.realpath("dangling_in") == world["root"] / "nothere.txt"


def test_dotdot_inside_a_root_is_fine(jail: Jail, world: dict[str, Path]) -> None:
    assert jail.realpath("sub/../a.txt") == world["root"] / "a.txt"
    assert jail.realpath("sub/..") == world["root"]


def test_symlink_loops_end(jail: Jail) -> None:
    with pytest.raises(OSError) as info:
        jail.read_bytes("loop1")
    assert info.value.errno == errno.ELOOP


def test_missing_folder_on_the_way(jail: Jail, world: dict[str, Path]) -> None:
    with pytest.raises(FileNotFoundError) as info:
        jail.read_bytes("nope/a.txt")
    assert info.value.filename == str(world["root"] / "nope")


# -- operations ----------------------------------------------------------------


def test_read_limit_and_open_file_reads_part(jail: Jail, world: dict[str, Path]) -> None:
    (world["root"] / "big.txt").write_bytes(b"x" * 1000)
    with pytest.raises(FileTooLarge) as info:
        jail.read_bytes("big.txt", limit=10)
    assert info.value.size == 1000
    with jail.open_file("big.txt") as (handle, real):
        assert real == world["root"] / "big.txt"
        assert handle.read(3) == b"xxx"
    with pytest.raises(IsADirectoryError):
        jail.read_bytes("sub")
    with pytest.raises(IsADirectoryError), jail.open_file(str(world["root"])):
        pass


def test_open_file_refuses_a_fifo_without_blocking(jail: Jail, world: dict[str, Path]) -> None:
    os.mkfifo(world["root"] / "pipe")
    with pytest.raises(OSError, match="regular"), jail.open_file("pipe"):
        pass


def test_write_atomic_creates_keeps_mode_and_leaves_no_temp(
    jail: Jail, world: dict[str, Path]
) -> None:
    jail.write_atomic("new.txt", b"one")
    assert (world["root"] / "new.txt").read_bytes() == b"one"
    os.chmod(world["root"] / "new.txt", 0o640)
    jail.write_atomic("new.txt", b"two")
    assert stat.S_IMODE(os.stat(world["root"] / "new.txt").st_mode) == 0o640
    with pytest.raises(FileExistsError):
        jail.write_atomic("new.txt", b"three", exclusive=True)
    assert (world["root"] / "new.txt").read_bytes() == b"two"
    assert not [p for p in world["root"].iterdir() if p.name.startswith(TEMP_PREFIX)]


def test_write_through_symlinks(jail: Jail, world: dict[str, Path]) -> None:
    before = outside_state(world)
    jail.write_atomic("inside_link", b"via link")
    assert (world["root"] / "a.txt").read_bytes() == b"via link"
    jail.write_atomic("dangling_in", b"created")
    assert (world["root"] / "nothere.txt").read_bytes() == b"created"
    for path in ("dangling_out", "file_out", "dir_out/new.txt", "rel_out/secret.txt"):
        with pytest.raises(ContainmentError):
            jail.write_atomic(path, b"PWNED", create_parents=True)
    assert outside_state(world) == before


def test_mkdir_mode_and_parents(jail: Jail, world: dict[str, Path]) -> None:
    old = os.umask(0o022)
    try:
        jail.mkdir("x/y/z", mode=0o777)
    finally:
        os.umask(old)
    for folder in ("x", "x/y", "x/y/z"):
        assert stat.S_IMODE(os.stat(world["root"] / folder).st_mode) == 0o755
    assert jail.mkdir("x/y/z") == world["root"] / "x/y/z"
    with pytest.raises(FileExistsError):
        jail.mkdir("a.txt")
    with pytest.raises(FileNotFoundError):
        jail.mkdir("p/q", parents=False)
    with pytest.raises(ContainmentError):
        jail.mkdir("dir_out/new")
    assert not (world["out"] / "new").exists()


def test_walk_never_enters_symlinks_and_exclude_prunes(jail: Jail, world: dict[str, Path]) -> None:
    (world["root"] / "sub" / "deep").mkdir()
    (world["root"] / "sub" / "deep" / "f.txt").write_text("f")
    entries = {str(e.path.relative_to(world["root"])): (d, e.kind) for d, e in jail.walk(".")}
    assert entries["dir_out"] == (1, "symlink")
    assert entries["sub/deep/f.txt"] == (3, "file")
    assert not any(
        name.startswith(("dir_out/", "rel_out/", "chain")) and "/" in name for name in entries
    )
    pruned = [e.name for _, e in jail.walk(".", exclude=lambda e: e.name == "deep")]
    assert "deep" not in pruned and "f.txt" not in pruned
    shallow = [e.name for _, e in jail.walk(".", max_depth=1)]
    assert "deep" not in shallow and "sub" in shallow


def test_rename_never_replaces_and_moves_links_not_targets(
    jail: Jail, world: dict[str, Path]
) -> None:
    with pytest.raises(FileExistsError):
        jail.rename("a.txt", "inside_link")
    jail.rename("file_out", "sub/moved_link")
    assert os.readlink(world["root"] / "sub" / "moved_link") == str(world["out"] / "secret.txt")
    assert (world["out"] / "secret.txt").read_text() == SECRET
    with pytest.raises(ContainmentError):
        jail.rename("a.txt", f"{world['out']}/stolen.txt")
    with pytest.raises(ContainmentError):
        jail.rename("dir_out/secret.txt", "stolen.txt")
    with pytest.raises(PermissionError):
        jail.rename(str(world["root"]), "elsewhere")


def test_remove_refuses_roots_and_removes_links_only(jail: Jail, world: dict[str, Path]) -> None:
    with pytest.raises(PermissionError):
        jail.remove(str(world["root2"]), recursive=True)
    jail.remove("dir_out")
    assert (world["out"] / "secret.txt").exists()


def test_scandir_reports_symlinks_as_such(jail: Jail) -> None:
    kinds = {e.name: e.kind for e in jail.scandir(".")}
    assert kinds["dir_out"] == "symlink" and kinds["sub"] == "dir" and kinds["a.txt"] == "file"
    with pytest.raises(NotADirectoryError):
        jail.scandir("a.txt")


# -- the race --------------------------------------------------------------------


def test_swapping_a_folder_for_an_outside_symlink_never_leaks(
    jail: Jail, world: dict[str, Path]
) -> None:
    swap, link = swap_pair(world["root"], world["out"], "edit me", SECRET)
    before = outside_state(world)
    denied = done = 0
    with swapping(swap, link) as swaps:
        deadline = time.monotonic() + 1.0
        i = 0
        while time.monotonic() < deadline or denied == 0 or done == 0:
            i += 1
            for op in (
                lambda i=i: jail.write_atomic(f"swap/w{i}.txt", b"PWNED"),
                lambda i=i: jail.mkdir(f"swap/d{i}/x"),
                lambda: jail.read_bytes("swap/e.txt"),
                lambda i=i: jail.rename(f"swap/w{i}.txt", f"swap/m{i}.txt"),
            ):
                try:
                    result = op()
                except ContainmentError:
                    denied += 1
                except OSError:
                    pass  # the folder was being swapped: missing or not a folder
                else:
                    done += 1
                    assert SECRET.encode() not in (result if isinstance(result, bytes) else b"")
            if time.monotonic() > deadline + 10:
                break
    assert swaps[0] > 10
    assert denied and done, (denied, done)
    assert outside_state(world) == before


def test_nested_roots_cannot_be_moved_or_deleted(tmp_path: Path) -> None:
    """With roots [/p, /p/a/sub], moving or deleting /p/a/sub or /p/a would lose a root."""
    outer = tmp_path / "p"
    inner = outer / "a" / "sub"
    inner.mkdir(parents=True)
    (inner / "f").write_text("x")
    jail = Jail([outer, inner])
    for path in ("a/sub", "a", str(inner)):
        with pytest.raises(RootChangeRefused):
            jail.rename(path, "moved")
        with pytest.raises(RootChangeRefused):
            jail.remove(path, recursive=True)
    assert (inner / "f").read_text() == "x"
    (outer / "b").mkdir()
    jail.rename("b", "c")  # other folders still move
    jail.remove("c", recursive=True)


def test_a_missing_folder_left_by_dotdot_is_skipped_not_created(
    jail: Jail, world: dict[str, Path]
) -> None:
    root = world["root"]
    assert jail.realpath("new1/new2/../../a.txt") == root / "a.txt"
    assert jail.read_bytes("new1/../a.txt") == b"hello\n"
    jail.mkdir("new1/x/../../made")
    assert (root / "made").is_dir() and not (root / "new1").exists()
    with pytest.raises(ContainmentError):
        jail.realpath("new1/../../outside/secret.txt")


def test_folders_made_for_a_refused_call_are_removed(jail: Jail, world: dict[str, Path]) -> None:
    root = world["root"]
    before = snapshot(world["base"])
    with pytest.raises(RuntimeError), jail.resolve("n1/n2/n3/file", create_parents=True):
        assert (root / "n1" / "n2" / "n3").is_dir()
        raise RuntimeError("refused after the folders were made")
    with pytest.raises(OSError) as info:
        jail.mkdir("n1/n2/" + "x" * 300)
    assert info.value.errno == errno.ENAMETOOLONG
    (root / "sub" / "keep").mkdir()
    with pytest.raises(OSError) as info:
        jail.rename("sub", "sub/keep/n1/n2", create_parents=True)
    assert info.value.errno == errno.EINVAL
    (root / "sub" / "keep").rmdir()
    assert snapshot(world["base"]) == before


def test_before_create_sees_the_final_path_and_can_refuse(
    jail: Jail, world: dict[str, Path]
) -> None:
    seen: list[Path] = []

    def refuse(planned: Path) -> None:
        seen.append(planned)
        raise PermissionError("no")

    with (
        pytest.raises(PermissionError),
        jail.resolve("sub/n1/n2/../n3/f", create_parents=True, before_create=refuse),
    ):
        pass
    assert seen == [world["root"] / "sub" / "n1" / "n3" / "f"]
    assert not (world["root"] / "sub" / "n1").exists()


# -- depth: no recursion, bounded descriptors ------------------------------------------------


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.slow
def test_walk_and_remove_a_chain_deeper_than_the_recursion_limit(
    world: dict[str, Path], clean_deep: None
) -> None:
    make_chain(world["root"] / "sub", 2500)
    jail = Jail([world["root"]])
    before = open_fds()
    peak = 0
    seen = []
    for depth, relative, entry in jail.walk_relative("sub"):
        peak = max(peak, open_fds())
        seen.append((depth, relative, entry.kind))
    assert len(seen) == 2501 and seen[-1] == (2501, "d/" * 2500 + "leaf.txt", "file")
    assert seen[1999] == (2000, "/".join(["d"] * 2000), "dir")
    assert peak - before < 100  # descriptors stay bounded at any depth
    assert open_fds() == before
    assert len(list(jail.walk("sub"))) == 2501  # the entry-only walk too
    jail.remove("sub/d", recursive=True)
    assert os.listdir(world["root"] / "sub") == []
    assert open_fds() == before


def test_walk_of_a_deep_comb_matches_os_walk(world: dict[str, Path]) -> None:
    """Siblings at every level force folders whose descriptors were closed to be reopened."""
    base = world["root"] / "sub"
    folder = base
    for level in range(150):
        (folder / f"f{level}.txt").write_text("x")
        (folder / "b_side").mkdir()
        (folder / "b_side" / "s.txt").write_text("s")
        folder = folder / "a"
        folder.mkdir()
    expected = sorted(
        os.path.relpath(os.path.join(top, name), base)
        for top, dirs, files in os.walk(base)
        for name in dirs + files
    )
    jail = Jail([world["root"]])
    walked = [relative for _depth, relative, _entry in jail.walk_relative("sub")]
    assert sorted(walked) == expected
    limited = [relative for depth, relative, _entry in jail.walk_relative("sub", max_depth=2)]
    assert max(r.count("/") for r in limited) == 1
    jail.remove("sub/a", recursive=True)
    assert sorted(os.listdir(base)) == ["b_side", "f0.txt"]


def test_remove_never_follows_symlinks_inside_the_tree(world: dict[str, Path]) -> None:
    outside = snapshot(world["root"].parent / "outside")
    victim = world["root"] / "sub" / "victim"
    victim.mkdir()
    make_chain(victim, 80)
    deep = victim.joinpath(*["d"] * 80)
    os.symlink(world["root"].parent / "outside", deep / "link_out")
    os.symlink(world["root"].parent / "outside" / "secret.txt", deep / "file_out")
    Jail([world["root"]]).remove("sub/victim", recursive=True)
    assert not victim.exists()
    assert snapshot(world["root"].parent / "outside") == outside


def test_walk_skips_a_folder_swapped_for_a_symlink(world: dict[str, Path]) -> None:
    """A folder replaced by a symlink after it was listed is not entered (O_NOFOLLOW)."""
    base = world["root"] / "sub"
    (base / "x").mkdir()
    jail = Jail([world["root"]])
    walk = jail.walk_relative("sub")
    _depth, relative, _entry = next(walk)
    assert relative == "x"
    (base / "x").rmdir()
    os.symlink(world["root"].parent / "outside", base / "x")
    assert list(walk) == []  # nothing of outside/ is listed


@pytest.mark.slow
def test_a_wide_and_deep_tree_is_swept_and_removed_under_a_low_descriptor_limit(
    world: dict[str, Path], clean_deep: None
) -> None:
    """More subfolders than the process may hold open at once, and a chain deeper than the
    recursion limit: the sweep and the removal open folders one at a time within a window."""
    import resource
    import subprocess
    import sys

    limit = 100
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < limit:
        pytest.skip(f"the hard descriptor limit is {hard}")
    root, stale, old = world["root"], f"{TEMP_PREFIX}dead", time.time() - 3600
    for i in range(3 * limit):
        (root / "wide" / f"s{i}").mkdir(parents=True)
        (root / "wide" / f"s{i}" / stale).write_text("litter")
        os.utime(root / "wide" / f"s{i}" / stale, (old, old))
    (root / "deep").mkdir()
    make_chain(root / "deep", 2500, leaf=stale, leaf_age=3600)
    (world["out"] / stale).write_text("outside: never swept")
    os.utime(world["out"] / stale, (old, old))
    code = f"""
import os, resource
from doc_processing_std_tools.containment import Jail
resource.setrlimit(resource.RLIMIT_NOFILE, ({limit}, {hard}))
jail = Jail([{str(root)!r}])
print(jail.sweep({str(root)!r}, recursive=True))
print(sorted(os.listdir({str(root)!r} + "/wide/s7")))
jail.remove("wide", recursive=True)
jail.remove("deep", recursive=True)
print(sorted(os.listdir({str(root)!r})))
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    swept, in_s7, left = run.stdout.splitlines()
    assert int(swept) == 3 * limit + 1  # each wide subfolder's and the chain's bottom one
    assert in_s7 == "[]"
    assert "wide" not in left and "deep" not in left
    assert (world["out"] / stale).exists()  # dir_out is a symlink: never followed


def test_a_walk_stops_when_a_folder_it_must_climb_back_to_was_replaced(
    world: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Climbing back to a closed folder goes through the ``..`` of the one it leaves, else
    by name from an open ancestor: neither finds it once it was moved and replaced, so the
    walk stops (ESTALE) instead of working on whatever now has its name."""
    from doc_processing_std_tools.containment import walks

    monkeypatch.setattr(walks, "_OPEN_FOLDERS", 2)  # a, b, c cannot all stay open
    base = world["root"] / "sub"
    (base / "a" / "b" / "c").mkdir(parents=True)
    away = world["base"] / "away"
    left: list[str] = []

    def visit(fd: int) -> list[str]:
        folders, _others = walks._subfolders(fd)
        if folders == [] and (base / "a" / "b" / "c").exists():  # in c: move b away, replace a
            os.rename(base / "a" / "b", away)
            os.rename(base / "a", base / "a-old")
            (base / "a" / "b").mkdir(parents=True)
        return folders

    top = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(OSError) as raised:
            walks.walk_folders(top, visit, lambda _fd, name: left.append(name))
    finally:
        os.close(top)
    assert raised.value.errno == errno.ESTALE
    assert left == ["c"]  # b's parent was not found again: nothing more was done


def test_removing_a_deep_chain_reopens_no_folder_from_the_top(
    world: dict[str, Path], clean_deep: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the window of open folders, climbing back opens each folder's parent through its
    ``..``: about two opens per level, where reopening from the top costs depth squared."""
    from doc_processing_std_tools.containment import walks

    make_chain(world["root"] / "sub", 2500)
    real_open, opens = os.open, [0]

    def counting_open(*args, **kwargs):
        opens[0] += 1
        return real_open(*args, **kwargs)

    monkeypatch.setattr(walks.os, "open", counting_open)
    Jail([world["root"]]).remove("sub/d", recursive=True)
    monkeypatch.undo()
    assert os.listdir(world["root"] / "sub") == []
    assert opens[0] < 3 * 2500
