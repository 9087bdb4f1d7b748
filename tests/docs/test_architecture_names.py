"""docs/architecture.md names only what exists, and lists every module of the folders it maps.

The page is the map a new maintainer reads first; a module moved or a class renamed must fail
here, not leave the map quietly wrong. Read from the sources, never imported (fast):

- every code reference on the page: a backticked path (``compose/mounting.py``, ``calls/``), a
  backticked identifier (``CallPolicy``, ``hold_async``, ``PROCESS_LOCK``), a dotted name
  (``CallPolicy.run``, ``locking.exclusive``, ``helpers.waiting``), and in the mermaid and text
  blocks every CamelCase, dotted, snake_case or ``.py`` name, exists: a file or folder of the
  repository; a name defined (``class``, ``def``, an assignment or a field) in the package, its
  tests or docs hooks, or in a library it uses (fastmcp, mcp, starlette, ...); a lowercase name
  may also be a string the package uses (a tool's name, a metric, an MCP field);
- each table row that maps a folder names only modules of that folder, and, for a row of one
  folder, every one of them;
- every folder and top-level module of the package and of the launcher is on the page.
"""

from __future__ import annotations

import functools
import importlib.util
import keyword
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "doc_processing_std_tools"
LAUNCHER = PACKAGE / "launcher"
PAGE = REPO / "docs" / "architecture.md"
# where a path on the page may be relative to, in this order
PATH_BASES = (REPO, PACKAGE, LAUNCHER, REPO / "tests")
# where a name on the page may be defined besides the package (its tests' helpers, the docs hook)
OWN_SOURCES = (PACKAGE, REPO / "tests", REPO / "docs" / "_hooks")
# the libraries whose names the page shows (a call's path goes through them)
LIBRARIES = (
    "fastmcp",
    "mcp",
    "mcp_types",
    "starlette",
    "uvicorn",
    "anyio",
    "prometheus_client",
    "opentelemetry",
)
NOT_MODULES = {"__init__.py", "__main__.py"}
NOT_PYTHON = {"md", "toml", "yaml", "yml", "json", "jsonl", "lock", "txt", "cfg", "ini", "log"}

FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
BACKTICKED = re.compile(r"`([^`\n]+)`")
IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
DOTTED = re.compile(rf"^{IDENTIFIER}(?:\.{IDENTIFIER})+$")
FILE = re.compile(r"^[\w*]+(?:/[\w*]+)*\.py$")
FOLDER = re.compile(r"^\w+(?:/\w+)*/$")
CAPITALISED = re.compile(r"^_?[A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*$")  # CallPolicy, Mount
CAMEL = re.compile(r"^_?[A-Z][a-z0-9]+[A-Z][A-Za-z0-9]*$|^_?[A-Z]+[a-z][a-z0-9]*[A-Z]\w*$")
CONSTANT = re.compile(r"^_?[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*$")  # PROCESS_LOCK, HELD
SNAKE = re.compile(r"^_?[a-z][a-z0-9]*(?:_[a-z0-9]+)+$|^_[a-z][a-z0-9]*$")  # hold_async, _route
WORD = re.compile(r"^[a-z][a-z0-9]*$")  # compose, run, locking
# in a fenced block: a name with a dot or a slash in it, or a bare identifier
BLOCK_TOKEN = re.compile(rf"{IDENTIFIER}(?:[./]{IDENTIFIER})*(?:\.py)?")
DEFINED = re.compile(
    rf"^[ \t]*(?:(?:async[ \t]+)?def|class)[ \t]+({IDENTIFIER})"  # def x, class X
    rf"|^[ \t]*({IDENTIFIER})[ \t]*(?::[^=\n]*)?=(?!=)"  # x = ..., x: T = ...
    rf"|^[ \t]*({IDENTIFIER})[ \t]*:[ \t]*[A-Za-z_\"'][^\n]*$"  # a field: x: T
    rf"|\bself\.({IDENTIFIER})[ \t]*(?::[^=\n]*)?=(?!=)"  # self.x = ...
    rf"|\bimport[ \t]+{IDENTIFIER}[ \t]+as[ \t]+({IDENTIFIER})",  # import x as y
    re.M,
)


@dataclass(frozen=True)
class Source:
    """One Python file: where it is, its text, and the names it defines."""

    path: Path
    text: str
    names: frozenset[str]


def _read(root: Path) -> Iterator[Source]:
    for path in sorted(root.rglob("*.py")):
        if "node_modules" in path.parts or "__pycache__" in path.parts:
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        names = frozenset(n for match in DEFINED.finditer(text) for n in match.groups() if n)
        yield Source(path, text, names)


@functools.cache
def own_sources() -> tuple[Source, ...]:
    return tuple(source for root in OWN_SOURCES for source in _read(root))


@functools.cache
def library_names() -> frozenset[str]:
    """Every name defined in the libraries' sources (located without importing them)."""
    names: set[str] = set()
    for library in LIBRARIES:
        spec = importlib.util.find_spec(library)
        for location in (spec.submodule_search_locations or []) if spec else []:
            names.update(n for s in _read(Path(location)) for n in s.names)
            names.update(p.stem for p in Path(location).rglob("*.py"))
    names.update(LIBRARIES)
    return frozenset(names)


@functools.cache
def string_literals() -> str:
    """The code's text (this module's left out: it quotes stale names), to find a name used as a
    string (a tool's, a metric's, an environment variable's)."""
    here = Path(__file__).resolve()
    return "\n".join(s.text for s in own_sources() if s.path != here)


def _path_exists(reference: str) -> bool:
    if "*" in reference:
        folder, _, pattern = reference.rpartition("/")
        return any(
            fnmatchcase(p.name, pattern)
            for base in PATH_BASES
            if (base / folder).is_dir()
            for p in (base / folder).iterdir()
        ) or any(fnmatchcase(p.name, pattern) for p in PACKAGE.rglob("*.py"))
    if any((base / reference).exists() for base in PATH_BASES):
        return True
    # a bare file name outside the tables: some module of the package has it
    return "/" not in reference.rstrip("/") and any(
        p.name == reference for p in PACKAGE.rglob("*.py")
    )


def _modules_named(parts: list[str]) -> list[Source]:
    """The sources of the module or package whose dotted path ends with *parts*
    (``locking``, ``relay_lines``, ``popoto_memory.calls``, ``helpers.paths``)."""
    tail = "/".join(parts)
    found = []
    for source in own_sources():
        relative = source.path.as_posix()
        if relative.endswith(f"/{tail}.py") or f"/{tail}/" in relative:
            found.append(source)
    return found


def _defined(name: str, sources: Iterable[Source]) -> bool:
    return any(name in s.names for s in sources)


def _used_as_string(name: str) -> bool:
    """*name* is a string of the package: ``"call_tool"``, ``"notifications/.../list_changed"``
    (a prometheus counter is exposed with ``_total``: ``dpt_tool_calls_total``)."""
    base = name.removesuffix("_total")
    return re.search(rf"[\"'][^\"'\s]*\b{re.escape(base)}[\"']", string_literals()) is not None


def _name_exists(name: str) -> bool:
    sources = own_sources()
    if _defined(name, sources) or _modules_named([name]):
        return True
    if name in library_names():
        return True
    return not CAPITALISED.match(name) and _used_as_string(name)


def _dotted_exists(reference: str) -> bool:
    parts = reference.split(".")
    # a module's path, then names defined in it (locking.exclusive, helpers.paths.SERVERS)
    for split in range(len(parts) - 1, 0, -1):
        modules = _modules_named(parts[:split])
        if modules:
            rest = parts[split:]
            return all(_defined(p, modules) or _modules_named([*parts[:split], p]) for p in rest)
    # a class, then its members (CallPolicy.run), in the files that define it
    owners = [s for s in own_sources() if parts[0] in s.names]
    if owners:
        return all(_defined(p, owners) for p in parts[1:])
    # a library's name (FastMCP.call_tool, anyio.fail_after)
    return all(p in library_names() for p in parts)


def problem(reference: str) -> str | None:
    """Why *reference* (a backticked span, or a token of a fenced block) names nothing, or None
    (it exists, or is not a code reference)."""
    if "<" in reference or reference.startswith(("-", "/", ".")):
        return None
    if FILE.match(reference) or FOLDER.match(reference):
        return None if _path_exists(reference) else "no such file or folder"
    if keyword.iskeyword(reference):
        return None
    if DOTTED.match(reference):
        parts = reference.split(".")
        if any(len(part) < 2 for part in parts) or parts[-1] in NOT_PYTHON:
            return None  # (prose: e.g.; a file that is not Python: pyproject.toml)
        if parts[0] in sys.stdlib_module_names:
            return None
        return None if _dotted_exists(reference) else "not defined where its prefix says"
    if (
        CAPITALISED.match(reference)
        or CONSTANT.match(reference)
        or SNAKE.match(reference)
        or WORD.match(reference)
    ):
        return None if _name_exists(reference) else "not defined anywhere"
    return None


def references(page: str) -> Iterator[str]:
    """The code references of *page*: its backticked spans outside fenced blocks, and the
    names in its fenced blocks (HTML tags and quoted text of mermaid left out of neither)."""
    for span in BACKTICKED.findall(FENCE.sub("", page)):
        yield span.strip()
    for block in FENCE.findall(page):
        text = re.sub(r"<[^>]+>", " ", block)
        for token in BLOCK_TOKEN.findall(text):
            # in a block, plain words are prose: only names that cannot be English count
            if (
                "." in token
                or "/" in token
                or CAMEL.match(token)
                or SNAKE.match(token)
                or ("_" in token and CONSTANT.match(token))
            ):
                yield token


def stale(page: str) -> list[str]:
    found = []
    for reference in dict.fromkeys(references(page)):
        why = problem(reference)
        if why is not None:
            found.append(f"{reference}: {why}")
    return found


def _folder(name: str) -> Path | None:
    for base in (LAUNCHER, PACKAGE):
        if (base / name).is_dir():
            return base / name
    return None


def _modules_of(folder: Path) -> set[str]:
    return {p.name for p in folder.glob("*.py") if p.name not in NOT_MODULES}


def row_problems(page: str) -> list[str]:
    """A table row mapping folders names only modules of them; a row of one folder, every one."""
    found = []
    for line in page.splitlines():
        if not line.startswith("| `"):
            continue
        first, _, rest = line[2:].partition(" |")
        folders = re.findall(r"`(\w+)/`", first)
        paths = [_folder(f) for f in folders]
        if not folders or None in paths:
            continue
        named = {s for s in BACKTICKED.findall(rest) if FILE.match(s) and "/" not in s}
        have = set().union(*(_modules_of(p) for p in paths if p is not None))
        for name in sorted(named):
            if not any(fnmatchcase(module, name) for module in have):
                found.append(f"row {first.strip()}: {name} is not a module of it")
        if len(folders) == 1:
            for module in sorted(have):
                if not any(fnmatchcase(module, name) for name in named):
                    found.append(f"row {first.strip()}: {module} is not listed")
    return found


def missing_folders_and_modules(page: str) -> list[str]:
    """The package's and the launcher's folders and top-level modules the page leaves out."""
    shown = set(BACKTICKED.findall(page))
    found = []
    for base in (PACKAGE, LAUNCHER):
        for path in sorted(base.iterdir()):
            if path.is_dir() and (path / "__init__.py").exists():
                if f"{path.name}/" not in shown:
                    found.append(f"{path.relative_to(PACKAGE)}/ is not on the page")
            elif path.suffix == ".py" and path.name not in NOT_MODULES | shown:
                found.append(f"{path.relative_to(PACKAGE)} is not on the page")
    return found


def test_every_name_on_the_page_exists() -> None:
    assert stale(PAGE.read_text(encoding="utf-8")) == []


def test_every_folder_row_lists_exactly_its_modules() -> None:
    assert row_problems(PAGE.read_text(encoding="utf-8")) == []


def test_every_folder_and_top_level_module_is_on_the_page() -> None:
    assert missing_folders_and_modules(PAGE.read_text(encoding="utf-8")) == []


def test_the_checks_catch_what_the_page_once_named() -> None:
    """Names the page held before issue 33's move, each caught: in prose, in a table row, in a
    fenced block."""
    old = (
        "Every tool is listed through `seams.mounted_provider`, which wraps each tool in a\n"
        "`GuardedTool`; `InlineCalls` applies the same rules. Write the verb in `cli/verbs.py`.\n"
        "\n| folder | what it holds | may import |\n|---|---|---|\n"
        "| `external/` | `relay.py`: `ToolRelay`. `fast_path.py`, `inline_call.py`. | `config` |\n"
        "\n```text\n-> FastPath._serve -> GuardedTool.guarded(FastPath._forward)\n"
        "-> LauncherRules.get_tool -> _Writer.put\n```\n"
    )
    assert stale(old) == [
        "seams.mounted_provider: not defined where its prefix says",
        "GuardedTool: not defined anywhere",
        "InlineCalls: not defined anywhere",
        "cli/verbs.py: no such file or folder",
        "inline_call.py: no such file or folder",
        "GuardedTool.guarded: not defined where its prefix says",
        "LauncherRules.get_tool: not defined where its prefix says",
        "_Writer.put: not defined where its prefix says",
    ]
    rows = row_problems(old)
    assert "row `external/`: inline_call.py is not a module of it" in rows
    assert "row `external/`: child_pipe.py is not listed" in rows
    assert "row `external/`: relay.py is not listed" not in rows
    missing = missing_folders_and_modules(old)
    assert "launcher/calls/ is not on the page" in missing
    assert "launcher/errors.py is not on the page" in missing
