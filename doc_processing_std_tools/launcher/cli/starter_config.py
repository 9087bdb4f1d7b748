"""``dpt-launch init``: write a commented starter config."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ...shared.install_hint import install_extra
from .status import EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from .status import fail as _fail

STARTER = """\
# dpt-launch config: the MCP servers mounted into one process.
# Check it:  dpt-launch --config {path} --check
# Reference: docs/launcher.md of doc-processing-std-tools
name: doc-processing-std-tools
transport: stdio            # or: {{type: http, host: 127.0.0.1, port: 8765, path: /mcp}}

servers:
  memory:
    server: memory-tools    # memory as plain files; see docs/servers/memory-tools.md
    settings: {{}}            # memory_dir: unset = ./agent_memory in the project the client
                            # runs in, else a per-user folder; a path set here is relative to this file

  filesystem:
    settings:
      # roots: the client's workspace roots when it sends them; set them here to pin them.
      read_only: false

  # popoto-memory:          # needs: {install_popoto}
  #   settings: {{backend: embedded}}

  # github:                 # any MCP server you already use, by command...
  #   command: npx
  #   args: [-y, "@modelcontextprotocol/server-github"]
  #   env: {{GITHUB_TOKEN: "${{GITHUB_TOKEN}}"}}
  #   namespace: gh
  # search:                 # ...or by URL
  #   url: https://mcp.example.com/mcp
  #   headers: {{Authorization: "Bearer ${{SEARCH_TOKEN}}"}}
"""


def init(args: argparse.Namespace) -> int:
    path = Path(args.path).expanduser()
    if path.exists():
        return _fail(f"{path} exists; pick another path or edit it", EXIT_USAGE)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            STARTER.format(path=path, install_popoto=install_extra("popoto")), encoding="utf-8"
        )
    except OSError as exc:
        return _fail(f"cannot write {path}: {exc.strerror or exc}", EXIT_FAILURE)
    print(f"wrote {path}; check it with: dpt-launch --config {path} --check", file=sys.stderr)
    return EXIT_OK


def parse(argv: list[str]) -> argparse.Namespace:
    """The arguments of ``init``."""
    parser = argparse.ArgumentParser(prog="dpt-launch init")
    parser.add_argument("path", nargs="?", default="tools.yaml")
    return parser.parse_args(argv)
