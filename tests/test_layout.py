"""The package's import structure: the launcher's layers (``launcher/__init__.py``) and no circles.

Imports inside ``if TYPE_CHECKING:`` and inside functions count: they are arrows a reader
follows too.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _import_graph() -> dict[str, set[str]]:
    grimp = pytest.importorskip("grimp")
    graph = grimp.build_graph("doc_processing_std_tools", cache_dir=None)
    return {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_cycle() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(edges) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_another_in_a_circle() -> None:
    edges = _import_graph()
    # A package's __init__ re-exporting its own modules is not an arrow back up.
    for module, imported in edges.items():
        edges[module] = {m for m in imported if not module.startswith(m + ".")}
    assert _cycles(edges) == []


def test_the_launchers_layers_point_one_way() -> None:
    """``lint-imports`` checks the contracts of ``[tool.importlinter]`` in pyproject.toml."""
    lint = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    if not Path(lint).exists():
        pytest.skip("import-linter is not installed (the dev extra)")
    done = subprocess.run([lint, "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_each_launcher_folder_says_what_it_holds_and_may_import() -> None:
    launcher = ROOT / "doc_processing_std_tools" / "launcher"
    folders = [p for p in launcher.iterdir() if (p / "__init__.py").exists()]
    assert {p.name for p in folders} == {
        "calls",
        "cli",
        "compose",
        "config",
        "external",
        "transports",
    }
    for folder in folders:
        text = (folder / "__init__.py").read_text()
        assert text.startswith('"""'), folder
        assert "import" in text.split('"""')[1], f"{folder.name}: say what it may import"
