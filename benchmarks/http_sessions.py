"""RSS of ``dpt-launch`` over HTTP while clients open sessions and abandon them.

Starts ``dpt-launch --transport http --port 0`` (one echo tool) with
``transport.session_idle_timeout`` set to ``--idle-timeout`` seconds, then opens
``--sessions`` MCP sessions over raw HTTP (``initialize`` + ``notifications/initialized``,
never closed) and prints the server's RSS at every thousand, and once more after the
idle timeout has passed. With a short timeout RSS stays flat; with ``--idle-timeout
3600`` (the default setting) it grows until sessions expire.

Run: ``python benchmarks/http_sessions.py [--sessions 5000] [--idle-timeout 5]``
(Linux: RSS comes from /proc). Not run in CI.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from helpers.launch import http_launcher  # noqa: E402
from helpers.rpc import open_session  # noqa: E402  (tests/ holds the helpers benchmarks share)

CONFIG = """\
transport:
  type: http
  session_idle_timeout: {idle}
servers:
  echo:
    module: bench_echo:mcp
"""
ECHO = """\
from fastmcp import FastMCP
mcp = FastMCP("echo")
@mcp.tool
def echo(text: str) -> str:
    return text
"""


def rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) / 1024  # type: ignore[union-attr]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=5000)
    parser.add_argument("--idle-timeout", type=float, default=5.0)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "bench_echo.py").write_text(ECHO)
        config = folder / "tools.yaml"
        config.write_text(CONFIG.format(idle=args.idle_timeout))
        with http_launcher(config, env={"PYTHONPATH": str(folder)}) as launched:
            proc, port = launched.proc, launched.port
            time.sleep(1)
            print(f"session_idle_timeout={args.idle_timeout:g}s")
            print(f"{'sessions':>8}  {'RSS MiB':>8}  {'elapsed s':>9}")
            start = time.monotonic()
            print(f"{0:>8}  {rss_mib(proc.pid):8.1f}  {0:9.1f}")
            for opened in range(1, args.sessions + 1):
                open_session(port, client="b")  # never closed
                if opened % 1000 == 0:
                    print(f"{opened:>8}  {rss_mib(proc.pid):8.1f}  {time.monotonic() - start:9.1f}")
            if args.idle_timeout < 60:
                time.sleep(args.idle_timeout + 2)
                print(f"{'+idle':>8}  {rss_mib(proc.pid):8.1f}  {time.monotonic() - start:9.1f}")


if __name__ == "__main__":
    main()
