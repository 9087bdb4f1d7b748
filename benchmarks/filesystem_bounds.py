"""The filesystem server's worst cases from issue 12, through a real ``dpt-launch`` over stdio.

Each figure is the wall time of one call (raw JSON-RPC over the launcher's pipes), or
the launcher's peak RSS:

* ``edit_file`` with a 400-line ``oldText`` that matches nowhere in a file at the read
  limit (5 MB), and one whose whitespace-flexible match is the file's last 400 lines;
* ``directory_tree`` and ``search_files`` with 100 ``excludePatterns`` of eight ``{a,b}``
  groups each (256 alternatives apiece) over 10,000 entries;
* a 2,500-deep folder chain: ``directory_tree`` (stops at its depth limit, says so),
  ``search_files`` for the leaf, and deleting it (``Jail.remove``, the path memory_delete
  takes; the filesystem server has no delete tool);
* the launcher's peak RSS (VmHWM) when a 10 MB ``search_files`` pattern is refused,
  next to its RSS when idle.

Also a side-by-side ratio: the 100 brace patterns against the same walk with no
pattern at all. Run: ``python benchmarks/filesystem_bounds.py [--quick]`` (Linux).
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))  # tests/ holds the helpers benchmarks share
from rpc_helpers import initialize_params, message, receive, send  # noqa: E402
from tree_helpers import make_chain  # noqa: E402

CONFIG = """\
servers:
  files:
    server: filesystem
    settings:
      roots: [{root}]
"""
BRACES = "{a,b}{c,d}{e,f}{g,h}{i,j}{k,l}{m,n}{o,p}"


class Launcher:
    """``dpt-launch`` on a config, spoken to with raw JSON-RPC lines over its pipes."""

    def __init__(self, config: Path) -> None:
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "doc_processing_std_tools.launcher.cli",
                "--config",
                str(config),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=config.parent,
        )
        self.next_id = 0
        self.request("initialize", initialize_params("bench"))
        send(self.process, message("notifications/initialized"))
        self.timed_call("list_allowed_directories", {})  # the first call pays for lazy imports
        self.timed_call(
            "edit_file", {"path": "missing.txt", "edits": [{"oldText": "a", "newText": "b"}]}
        )

    def request(self, method: str, params: dict) -> dict:
        self.next_id += 1
        send(self.process, message(method, params, id=self.next_id))
        return receive(self.process, self.next_id)

    def timed_call(self, tool: str, arguments: dict) -> tuple[float, dict]:
        started = time.perf_counter()
        reply = self.request("tools/call", {"name": tool, "arguments": arguments})
        return time.perf_counter() - started, reply["result"]

    def memory_mb(self, field: str) -> float:
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        return int(re.search(rf"{field}:\s+(\d+) kB", status).group(1)) / 1024  # type: ignore[union-attr]

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _text(result: dict) -> str:
    return "\n".join(block.get("text", "") for block in result.get("content", []))


def _build(root: Path, entries: int) -> None:
    lines = [f"    line {i} = value({i})" for i in range(150_000)]
    body = "\n".join(lines) + "\n"
    (root / "big.py").write_text(body[: 5 * 1024 * 1024 - 1024].rsplit("\n", 1)[0] + "\n")
    wide = root / "wide"
    per_folder = 100
    for folder in range(entries // (per_folder + 1)):
        sub = wide / f"dir{folder:03d}"
        sub.mkdir(parents=True)
        for name in range(per_folder):
            (sub / f"file{name:03d}.txt").write_text("x")
    (root / "deep").mkdir()
    make_chain(root / "deep", 2500)


def figures(quick: bool = False) -> dict[str, float]:
    from doc_processing_std_tools.containment import Jail

    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="dpt-fs-bounds-") as tmp:
        base = Path(tmp)
        root = base / "root"
        root.mkdir()
        entries = 10_000  # with --quick too: the docs quote these figures (a few seconds)
        _build(root, entries)
        config = base / "tools.yaml"
        config.write_text(CONFIG.format(root=root))

        launcher = Launcher(config)
        try:
            idle = launcher.memory_mb("VmRSS")
            huge = "x" * 10_000_000
            seconds, result = launcher.timed_call("search_files", {"path": ".", "pattern": huge})
            assert result.get("isError"), "a 10 MB pattern must be refused"
            assert len(_text(result)) < 1500, "the refusal quotes at most ~1 KB"
            results["search_files 10 MB pattern: launcher peak RSS (MB)"] = launcher.memory_mb(
                "VmHWM"
            )
            results["launcher RSS when idle (MB)"] = idle
            results["search_files 10 MB pattern: refused in (s)"] = seconds
            written, _ = launcher.timed_call("write_file", {"path": "w.txt", "content": huge})
            # What is left is the transport's cost of carrying 10 MB (the same for any tool).
            results["search_files 10 MB pattern refusal / write_file 10 MB ratio"] = (
                seconds / written
            )
        finally:
            launcher.close()

        launcher = Launcher(config)
        try:
            nowhere = "\n".join(f"  no match {i}" for i in range(400))
            seconds, result = launcher.timed_call(
                "edit_file", {"path": "big.py", "edits": [{"oldText": nowhere, "newText": "x"}]}
            )
            assert result.get("isError")
            results["edit_file 400-line oldText matching nowhere, 5 MB file (s, target <= 1.0)"] = (
                seconds
            )
            last = (root / "big.py").read_text().splitlines()[-400:]
            flexible = "\n".join(line.strip() for line in last)
            seconds, result = launcher.timed_call(
                "edit_file",
                {"path": "big.py", "edits": [{"oldText": flexible, "newText": "  replaced"}]},
            )
            assert not result.get("isError"), _text(result)[:300]
            results[
                "edit_file whitespace-flexible match of the last 400 lines, 5 MB file (s, target <= 1.0)"
            ] = seconds

            patterns = [f"{BRACES}{i}" for i in range(100)]
            plain, _ = launcher.timed_call("directory_tree", {"path": "wide"})
            seconds, result = launcher.timed_call(
                "directory_tree", {"path": "wide", "excludePatterns": patterns}
            )
            assert not result.get("isError"), _text(result)[:300]
            results[
                f"directory_tree, 100 brace excludePatterns, {entries:,} entries (s, target <= 1.0)"
            ] = seconds
            results["directory_tree 100 brace excludePatterns / no pattern ratio"] = seconds / plain
            seconds, result = launcher.timed_call(
                "search_files",
                {"path": "wide", "pattern": "**/file00*.txt", "excludePatterns": patterns},
            )
            assert not result.get("isError"), _text(result)[:300]
            results[
                f"search_files, 100 brace excludePatterns, {entries:,} entries (s, target <= 1.0)"
            ] = seconds

            seconds, result = launcher.timed_call("directory_tree", {"path": "deep"})
            assert not result.get("isError") and "depth limit" in _text(result)
            results["directory_tree of a 2,500-deep chain (s)"] = seconds
            seconds, result = launcher.timed_call(
                "search_files", {"path": "deep", "pattern": "**/leaf.txt"}
            )
            assert _text(result).endswith("leaf.txt"), _text(result)[:300]
            results["search_files in a 2,500-deep chain (s)"] = seconds
        finally:
            launcher.close()

        started = time.perf_counter()
        Jail([root]).remove("deep", recursive=True)
        results["delete a 2,500-deep chain (s)"] = deleted = time.perf_counter() - started
        (root / "deep").mkdir()
        make_chain(root / "deep", 2500)
        started = time.perf_counter()
        subprocess.run(["rm", "-rf", str(root / "deep")], check=True)
        results["delete a 2,500-deep chain / rm -rf ratio"] = deleted / (
            time.perf_counter() - started
        )
    return results


if __name__ == "__main__":
    import figures_cli  # benchmarks/ is sys.path[0] when run as a script

    figures_cli.main(figures, __doc__, "the same run (it is short)")
