"""cli/serve.py: serving over stdio pays only for what stdio needs before its first answer."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from helpers.launch import SPAWN_TIMEOUT, launcher_command
from helpers.rpc import first_tools

# What the first tools/list of in-process servers over stdio must not import (each defers it
# to the path that needs it): fastmcp's client (an external server), jsonref (a tool schema
# with "$defs"), snowballstemmer (a tool search), the HTTP transport, --check's tables.
NOT_BEFORE_FIRST_LIST = (
    "fastmcp.client.client",
    "jsonref",
    "snowballstemmer",
    "doc_processing_std_tools.launcher.transports.http",
    "doc_processing_std_tools.launcher.cli.report",
)


def test_first_stdio_list_imports_nothing_only_other_paths_need(tmp_path: Path) -> None:
    config = tmp_path / "in-process.yaml"
    config.write_text(
        f"servers:\n  memory:\n    server: memory-tools\n"
        f"    settings: {{memory_dir: {tmp_path / 'mem'}}}\n"
        f"  filesystem:\n    settings: {{roots: [{tmp_path}]}}\n"
    )
    imports = tmp_path / "imports.log"
    with imports.open("wb") as errlog:
        proc = subprocess.Popen(
            [*launcher_command(), "--config", str(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errlog,
            cwd=tmp_path,
            env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"},
        )
        try:
            tools = first_tools(proc)
            imported = {
                line.rsplit("|", 1)[-1].strip() for line in imports.read_text().splitlines()
            }
        finally:
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(timeout=SPAWN_TIMEOUT)
    assert any(tool["name"] == "edit_file" for tool in tools)
    assert "fastmcp" in imported  # (the log is read)
    assert [name for name in NOT_BEFORE_FIRST_LIST if name in imported] == []
