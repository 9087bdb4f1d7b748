"""Path resolution, property-based (issue 12, Reliability, with hypothesis): any generated path
(relative, absolute, ``..``, ``.``, empty parts, symlinks in, out, relative out, chained and
looping) either resolves inside the root, to what the operating system's own resolution
(``os.path.realpath``) gives, or is refused; operations on it never change anything outside
the root.

Example counts come from the ``ci`` profile; ``HYPOTHESIS_PROFILE=soak`` runs many more.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from doc_processing_std_tools.containment import ContainmentError, Jail
from helpers.properties import PROFILE
from helpers.trees import snapshot


def make_world(base: Path) -> tuple[Path, Path]:
    """base/root (the jail) and base/outside, with symlinks of every kind inside the root."""
    root = base / "root"
    outside = base / "outside"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "f.txt").write_text("inside")
    (root / "g.txt").write_text("inside")
    (outside / "o").mkdir(parents=True)
    (outside / "secret.txt").write_text("secret")
    (root / "in").symlink_to("a/b")  # relative, inside
    (root / "a" / "up").symlink_to("..")  # to the root itself
    (root / "a" / "b" / "file").symlink_to("../f.txt")
    (root / "absin").symlink_to(root / "a")  # absolute, inside
    (root / "out").symlink_to(outside)  # absolute, outside
    (root / "relout").symlink_to("../outside")  # relative, outside
    (root / "a" / "deepout").symlink_to("../../outside/o")
    (root / "chain").symlink_to("in")  # a chain ending inside
    (root / "chainout").symlink_to("relout")  # a chain ending outside
    (root / "loop1").symlink_to("loop2")
    (root / "loop2").symlink_to("loop1")
    (root / "dangling").symlink_to("nowhere/x")
    return root, outside


PARTS = st.sampled_from(
    [
        "a", "b", "f.txt", "g.txt", "up", "file", "in", "absin", "out", "relout", "deepout",
        "chain", "chainout", "loop1", "dangling", "missing", "new", "..", ".", "", "root",
        "outside", "o", "secret.txt",
    ]
)  # fmt: skip
PATHS = st.tuples(
    st.sampled_from(["", "/", "<root>/", "<base>/", "<outside>/", "~/"]),
    st.lists(PARTS, max_size=7),
)


def spell(prefix: str, parts: list[str], root: Path, outside: Path) -> str:
    prefix = (
        prefix.replace("<root>", str(root))
        .replace("<base>", str(root.parent))
        .replace("<outside>", str(outside))
    )
    return prefix + "/".join(parts)


def reference(path: str, root: Path) -> Path:
    """What the OS resolves *path* to, relative paths taken from the root."""
    if path == "~" or path.startswith("~/"):
        path = os.path.expanduser(path)
    return Path(os.path.realpath(os.path.join(root, path)))


def inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def outside_state(base: Path, root: Path) -> dict[str, tuple]:
    return snapshot(base, skip=(root,))


@settings(settings.get_profile(PROFILE))
@given(PATHS)
def test_a_path_resolves_inside_the_root_or_is_refused(spelled: tuple[str, list[str]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(os.path.realpath(tmp))
        root, outside = make_world(base)
        path = spell(*spelled, root, outside)
        expected = reference(path, root)
        jail = Jail([root])
        try:
            got = jail.realpath(path)
        except ContainmentError:
            # Refusing is always allowed; what the OS resolves inside is allowed too, but
            # what it resolves outside must be refused.
            return
        except (OSError, ValueError):
            return  # a loop, a file used as a folder, a bad name: refused
        assert inside(got, root), (path, got)
        assert got == expected, (path, got, expected)


OPERATIONS = st.sampled_from(["mkdir", "write", "create", "remove", "rename_from", "rename_to"])


@pytest.mark.slow
@settings(settings.get_profile(PROFILE))
@given(PATHS, OPERATIONS)
def test_no_operation_on_any_path_changes_anything_outside(
    spelled: tuple[str, list[str]], operation: str
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(os.path.realpath(tmp))
        root, outside = make_world(base)
        path = spell(*spelled, root, outside)
        jail = Jail([root])
        before = outside_state(base, root)
        try:
            if operation == "mkdir":
                jail.mkdir(path)
            elif operation == "write":
                jail.write_atomic(path, b"written", create_parents=True)
            elif operation == "create":
                jail.write_atomic(path, b"written", create_parents=True, exclusive=True)
            elif operation == "remove":
                jail.remove(path, recursive=True)
            elif operation == "rename_from":
                jail.rename(path, "moved-here", create_parents=True)
            else:
                jail.rename("g.txt", path, create_parents=True)
        except (OSError, ValueError):
            pass
        assert outside_state(base, root) == before, (operation, path)
        assert os.path.isdir(root), (operation, path)  # the root itself stays
