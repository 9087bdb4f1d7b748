"""The memory file commands (``memory_create/view/str_replace/insert/delete/rename``) on
:class:`~doc_processing_std_tools.memory.MemoryStore` against a dict model, as a hypothesis
stateful machine (issue 12, Reliability; plain Python, no MCP, to stay fast).

Example counts come from the ``ci`` profile; ``HYPOTHESIS_PROFILE=soak`` runs many more.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from doc_processing_std_tools.containment import RESERVED_PREFIX
from doc_processing_std_tools.memory import MemoryStore, MemoryStoreError
from doc_processing_std_tools.memory.formats import _numbered, _split_lines
from helpers.properties import PROFILE

NAMES = st.sampled_from(["a", "b", "n.md", "t.txt"])
MEM_PATHS = st.lists(NAMES, min_size=1, max_size=3).map(lambda parts: "/" + "/".join(parts))
TEXTS = st.text(alphabet="ab \né", max_size=30)
NEEDLES = st.text(alphabet="ab \né", min_size=1, max_size=4)


class MemoryFilesModel(RuleBasedStateMachine):
    """MemoryStore's file commands and a dict of files + a set of folders, step by step:
    the same success or refusal, and the same folder content after every step."""

    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.mkdtemp()
        self.dir = Path(self.tmp) / "mem"
        self.store = MemoryStore(self.dir)
        self.files: dict[tuple[str, ...], str] = {}
        self.dirs: set[tuple[str, ...]] = set()

    def teardown(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- the model's view of paths --

    @staticmethod
    def parts(path: str) -> tuple[str, ...]:
        return tuple(p for p in path.split("/") if p)

    def exists(self, parts: tuple[str, ...]) -> bool:
        return parts == () or parts in self.files or parts in self.dirs

    def parents_ok(self, parts: tuple[str, ...]) -> bool:
        """No proper prefix of *parts* is a file (missing folders may be created)."""
        return not any(parts[:i] in self.files for i in range(1, len(parts)))

    def add_parents(self, parts: tuple[str, ...]) -> None:
        for i in range(1, len(parts)):
            self.dirs.add(parts[:i])

    def attempt(self, expect_ok: bool, method, *args) -> str | None:
        try:
            result = method(*args)
        except MemoryStoreError as exc:
            assert not expect_ok, (method.__name__, args, str(exc))
            return None
        assert expect_ok, (method.__name__, args, result)
        return result

    # -- rules --

    @rule(path=MEM_PATHS, text=TEXTS)
    def create(self, path: str, text: str) -> None:
        parts = self.parts(path)
        ok = not self.exists(parts) and self.parents_ok(parts)
        if self.attempt(ok, self.store.create, path, text) is not None:
            self.add_parents(parts)
            self.files[parts] = text

    @rule(path=MEM_PATHS)
    def view(self, path: str) -> None:
        parts = self.parts(path)
        ok = self.exists(parts) and self.parents_ok(parts)
        result = self.attempt(ok, self.store.view, path, None)
        if result is not None and parts in self.files:
            lines = _split_lines(self.files[parts])
            body = _numbered(lines, 0, len(lines))
            header = f"Here's the content of {path} with line numbers:"
            assert result == (f"{header}\n{body}" if body else header)
        elif result is not None:  # a folder: every child up to 2 levels deep is listed
            for other in [*self.files, *self.dirs]:
                if other[: len(parts)] == parts and 0 < len(other) - len(parts) <= 2:
                    shown = "/" + "/".join(other) + ("/" if other in self.dirs else "")
                    assert f"\t{shown}\n" in result + "\n", (shown, result)

    @rule(path=MEM_PATHS, old=NEEDLES, new=TEXTS)
    def str_replace(self, path: str, old: str, new: str) -> None:
        parts = self.parts(path)
        content = self.files.get(parts) if self.parents_ok(parts) else None
        ok = content is not None and content.count(old) == 1
        if self.attempt(ok, self.store.str_replace, path, old, new) is not None:
            assert content is not None
            self.files[parts] = content.replace(old, new, 1)

    @rule(path=MEM_PATHS, line=st.integers(-1, 6), text=TEXTS)
    def insert(self, path: str, line: int, text: str) -> None:
        parts = self.parts(path)
        content = self.files.get(parts) if self.parents_ok(parts) else None
        lines = _split_lines(content) if content is not None else []
        ok = content is not None and 0 <= line <= len(lines)
        if self.attempt(ok, self.store.insert, path, line, text) is not None:
            new = (text[:-1] if text.endswith("\n") else text).split("\n")
            self.files[parts] = "\n".join([*lines[:line], *new, *lines[line:]]) + "\n"

    @rule(path=MEM_PATHS)
    def delete(self, path: str) -> None:
        parts = self.parts(path)
        ok = parts != () and self.exists(parts) and self.parents_ok(parts)
        if self.attempt(ok, self.store.delete_path, path) is not None:
            below = lambda p: p[: len(parts)] == parts  # noqa: E731
            self.files = {p: t for p, t in self.files.items() if not below(p)}
            self.dirs = {p for p in self.dirs if not below(p)}

    @rule(old=MEM_PATHS, new=MEM_PATHS)
    def rename(self, old: str, new: str) -> None:
        src, dst = self.parts(old), self.parts(new)
        ok = (
            self.exists(src)
            and self.parents_ok(src)
            and not self.exists(dst)
            and self.parents_ok(dst)
            and dst[: len(src)] != src  # not into itself
        )
        if self.attempt(ok, self.store.rename, old, new) is not None:
            self.add_parents(dst)
            moved = lambda p: dst + p[len(src) :] if p[: len(src)] == src else p  # noqa: E731
            self.files = {moved(p): t for p, t in self.files.items()}
            self.dirs = {moved(p) for p in self.dirs}

    @precondition(lambda self: bool(self.files))
    @rule(data=st.data())
    def replace_in_a_known_file(self, data: st.DataObject) -> None:
        """A str_replace that the model says succeeds (random needles rarely occur once)."""
        parts = data.draw(st.sampled_from(sorted(self.files)))
        content = self.files[parts]
        if not content:
            return
        start = data.draw(st.integers(0, len(content) - 1))
        old = content[start : start + data.draw(st.integers(1, 6))]
        self.str_replace("/" + "/".join(parts), old, data.draw(TEXTS))

    @precondition(lambda self: bool(self.files))
    @rule(data=st.data(), text=TEXTS)
    def insert_in_a_known_file(self, data: st.DataObject, text: str) -> None:
        parts = data.draw(st.sampled_from(sorted(self.files)))
        line = data.draw(st.integers(0, len(_split_lines(self.files[parts]))))
        self.insert("/" + "/".join(parts), line, text)

    @precondition(lambda self: bool(self.files or self.dirs))
    @rule(data=st.data())
    def view_a_known_path(self, data: st.DataObject) -> None:
        parts = data.draw(st.sampled_from(sorted([*self.files, *self.dirs])))
        self.view("/" + "/".join(parts))

    @precondition(lambda self: bool(self.files or self.dirs))
    @rule(data=st.data(), new=MEM_PATHS)
    def rename_a_known_path(self, data: st.DataObject, new: str) -> None:
        parts = data.draw(st.sampled_from(sorted([*self.files, *self.dirs])))
        self.rename("/" + "/".join(parts), new)

    @precondition(lambda self: bool(self.files or self.dirs))
    @rule(data=st.data())
    def delete_a_known_path(self, data: st.DataObject) -> None:
        parts = data.draw(st.sampled_from(sorted([*self.files, *self.dirs])))
        self.delete("/" + "/".join(parts))

    # -- the folder always equals the model --

    @invariant()
    def disk_equals_model(self) -> None:
        if not self.dir.exists():
            return
        files: dict[tuple[str, ...], str] = {}
        dirs: set[tuple[str, ...]] = set()
        for folder, subdirs, names in os.walk(self.dir):
            rel = Path(folder).relative_to(self.dir).parts
            subdirs[:] = [d for d in subdirs if not d.startswith(RESERVED_PREFIX)]
            dirs.update((*rel, d) for d in subdirs)
            for name in names:
                if name.startswith(RESERVED_PREFIX):
                    assert not name.startswith(".dpt-tmp-"), "a temp file was left behind"
                    continue
                if not rel and name == ".gitignore":  # the folder's own (memory.folder)
                    continue
                path = Path(folder) / name
                assert stat.S_ISREG(os.lstat(path).st_mode)
                files[(*rel, name)] = path.read_text(encoding="utf-8")
        assert files == self.files
        assert dirs == self.dirs


MemoryFilesModel.TestCase.settings = settings(
    settings.get_profile(PROFILE),
    max_examples=60 if PROFILE == "ci" else 2000,
    stateful_step_count=30,
)
test_memory_file_commands_match_a_dict_model = MemoryFilesModel.TestCase
