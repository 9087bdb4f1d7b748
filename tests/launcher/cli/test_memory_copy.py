"""``dpt-launch memory copy`` refuses wrong input (issue 35, point 9): exit 2, one line, nothing
written. A source that does not exist or is not a memory store, an empty source (unless
``--allow-empty``), a url query key other than ``namespace``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from doc_processing_std_tools.launcher.cli.memory_copy import main
from doc_processing_std_tools.memory import MemoryStore
from helpers.memory_files import FolderFiles, RedisFiles, write_entry
from helpers.redis_server import REDIS_SERVER, SKIP_REASON

needs_redis = pytest.mark.skipif(REDIS_SERVER is None, reason=SKIP_REASON)


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run the verb: it must exit 2 with one line on stderr and nothing on stdout."""
    assert main(["copy", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("dpt-launch: error: memory copy: ")
    return err


def test_a_source_folder_that_does_not_exist(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    err = refused(capsys, str(tmp_path / "nowhere"), str(tmp_path / "target"))
    assert f"the source folder {tmp_path / 'nowhere'} does not exist" in err
    assert not (tmp_path / "target").exists()
    (tmp_path / "a-file").write_text("x")
    assert "is not a folder" in refused(capsys, str(tmp_path / "a-file"), str(tmp_path / "target"))


def test_a_folder_that_is_not_a_memory_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "package.json").write_text('{"name": "x"}')
    (project / "README.md").write_text("hello\n")
    err = refused(capsys, str(project), str(tmp_path / "target"))
    assert f"{project} is not a memory store:" in err and "give the memory folder" in err
    assert not (tmp_path / "target").exists()
    MemoryStore(project / "agent_memory").write("k", "v")  # the project's memory, inside it
    err = refused(capsys, str(project), str(tmp_path / "target"))
    assert f"(its memory folder is {project / 'agent_memory'})" in err
    assert main(["copy", str(project / "agent_memory"), str(tmp_path / "target")]) == 0


def test_memory_folders_written_any_way_are_accepted(tmp_path: Path):
    """Entries written by another program (no marker, no .gitignore), the tools' own folder
    whose entries are all files of the file tools, and one whose .gitignore is all it has left."""
    by_program = tmp_path / "by-program"
    by_program.mkdir()
    write_entry(by_program, "k", "written without the tools")
    tools_files = tmp_path / "tools-files"
    MemoryStore(tools_files).create("notes/todo.md", "one\n")
    for source in (by_program, tools_files):
        target = tmp_path / f"copy-of-{source.name}"
        assert main(["copy", str(source), str(target)]) == 0
        assert FolderFiles(target).files() == FolderFiles(source).files()
    (tools_files / ".dpt.lock").unlink()
    assert main(["copy", str(tools_files), str(tmp_path / "third")]) == 0  # its .gitignore


def test_an_empty_source_unless_allowed(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    empty = tmp_path / "empty"
    MemoryStore(empty).write("k", "v")
    MemoryStore(empty).delete("k")  # a memory folder, now empty
    err = refused(capsys, str(empty), str(tmp_path / "target"))
    assert f"the source {empty} is empty: nothing to copy (--allow-empty" in err
    assert not (tmp_path / "target").exists()
    assert main(["copy", "--allow-empty", str(empty), str(tmp_path / "target")]) == 0
    assert "Copied 0 files and 0 folders" in capsys.readouterr().out


@needs_redis
def test_a_redis_namespace_that_does_not_exist_or_is_empty(
    redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    from doc_processing_std_tools.memory.redis_connection import RedisMemory
    from doc_processing_std_tools.memory.redis_store import RedisMemoryStore

    team = f"team-{os.getpid()}"
    RedisMemoryStore(RedisMemory(redis_url, team)).write("k", "v")
    err = refused(capsys, f"{redis_url}?namespace={team}x", str(tmp_path / "target"))
    assert f"the namespace '{team}x' does not exist in {redis_url}" in err
    assert f"(did you mean '{team}'" in err  # the one meant is named first
    assert not (tmp_path / "target").exists()
    gone = f"gone-{os.getpid()}"
    RedisMemoryStore(RedisMemory(redis_url, gone)).write("k", "v")
    RedisMemoryStore(RedisMemory(redis_url, gone)).delete("k")
    err = refused(capsys, f"{redis_url}?namespace={gone}", str(tmp_path / "target"))
    assert "is empty: nothing to copy" in err


@needs_redis
def test_unknown_query_keys_in_a_url(
    redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    source = tmp_path / "source"
    MemoryStore(source).write("k", "v")
    typo = f"{redis_url}?namespce=x"
    default = RedisFiles(redis_url, "default").files()
    err = refused(capsys, str(source), typo)
    assert "unknown query key 'namespce'" in err and "the only one is namespace" in err
    assert RedisFiles(redis_url, "default").files() == default  # nothing went into the default
    assert not redis.Redis.from_url(redis_url).exists("dpt-memory:{x}:files")
    err = refused(capsys, f"{redis_url}?namespace=", str(tmp_path / "target"))
    assert "the namespace must not be empty" in err
    assert "unknown query key" in refused(capsys, typo, str(tmp_path / "target"))


def test_the_command_line_exits_2_with_one_line(tmp_path: Path):
    out = subprocess.run(
        [sys.executable, "-m", "doc_processing_std_tools.launcher.cli", "memory", "copy",
         str(tmp_path / "nowhere"), str(tmp_path / "target")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2, out
    assert out.stdout == "" and out.stderr.count("\n") == 1, out.stderr
    assert "does not exist" in out.stderr
