"""The tool search as it was when the fresh held-out set came: this checkout's
``tool_retrieval.py`` (its query sets, catalogs and timings) run against the ranker of commit
:data:`BASELINE`, the last before the ranker changed, so the page's "as it came" figures come
from a run, side by side with ``tool_retrieval``'s "now".

The ranker is deterministic, so its recall figures are those of that commit on any machine; the
timings are this machine's now. The old package is checked out into a temporary folder (``git
worktree add --detach``) and put first on ``PYTHONPATH``; the benchmark's ``--json`` file is read
back and named as ``tool_retrieval.labelled`` names this checkout's.

Run: ``python benchmarks/tool_retrieval_baseline.py`` (needs git and this repository's history).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from checkouts import env_for

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
# faa3b69: the fresh held-out set measured as it came with the frozen ranker (issue 38)
BASELINE = "faa3b69"


def git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True)


def unavailable() -> str | None:
    """Why the baseline cannot be checked out here, or None."""
    if git("cat-file", "-e", f"{BASELINE}^{{commit}}").returncode != 0:
        return f"needs git and commit {BASELINE} of this repository"
    return None


def results_at(commit: str) -> dict:
    """``tool_retrieval.results()`` of this checkout's benchmark on *commit*'s ranker."""
    with tempfile.TemporaryDirectory(prefix="dpt-retrieval-baseline-") as tmp:
        tree = Path(tmp) / "tree"
        added = git("worktree", "add", "--detach", str(tree), commit)
        if added.returncode != 0:
            raise RuntimeError(f"git worktree add {commit}: {added.stderr.strip()}")
        try:
            out = Path(tmp) / "results.json"
            subprocess.run(
                [sys.executable, str(HERE / "tool_retrieval.py"), "--json", str(out)],
                env=env_for(tree, os.environ),
                cwd=tmp,
                check=True,
                stdout=subprocess.DEVNULL,
            )
            return json.loads(out.read_text())
        finally:
            git("worktree", "remove", "--force", str(tree))


def figures(quick: bool = False) -> dict[str, float]:
    """Named as ``tool_retrieval``'s; the ranker is deterministic, so *quick* changes nothing."""
    from tool_retrieval import labelled

    return labelled(results_at(BASELINE))


if __name__ == "__main__":
    for name, value in figures().items():
        print(f"  {name:<70} {value:10.3f}")
