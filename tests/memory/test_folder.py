"""The memory folder's own ``.gitignore`` does what its comment says."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from doc_processing_std_tools.memory.folder import GITIGNORE


def test_the_comment_names_only_lines_the_file_has() -> None:
    lines = GITIGNORE.splitlines()
    rules = {line for line in lines if line and not line.startswith("#")}
    comment = " ".join(line for line in lines if line.startswith("#"))
    named = set(re.findall(r"the line `([^`]+)`", comment))
    assert named and named <= rules


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_deleting_the_star_line_commits_memories_but_not_the_markers(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    folder = tmp_path / "agent_memory"
    folder.mkdir()
    (folder / ".gitignore").write_text(GITIGNORE)

    def ignored(name: str) -> bool:
        check = subprocess.run(
            ["git", "-C", str(tmp_path), "check-ignore", "-q", f"agent_memory/{name}"]
        )
        return check.returncode == 0

    assert ignored("notes.md") and ignored(".dpt.lock")
    (folder / ".gitignore").write_text(GITIGNORE.replace("\n*\n", "\n"))
    assert not ignored("notes.md") and ignored(".dpt.lock") and ignored(".dpt-tmp-1")
