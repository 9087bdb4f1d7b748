"""Every launcher config and ``dpt-launch`` command the README and docs/ show is one that works.

* Each fenced ``yaml`` block with a top-level ``servers:`` key is loaded as ``--check`` loads a
  config (schema, ``${VAR}`` expansion, each in-process server's settings), offline: external
  ``command:`` / ``url:`` servers are not started.
* Each ``dpt-launch ...`` command line in a ``bash`` / ``console`` / ``sh`` / ``shell`` block (or
  after ``claude mcp add ... --``) is parsed by the argument parser of its verb.

A block that is deliberately partial says so with ``<!-- snippet: partial -->`` on the line
before its fence; those are counted, so they stay few.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from doc_processing_std_tools.launcher.cli import (
    client_config,
    connect,
    login,
    main,
    memory_copy,
    pins_verbs,
    starter_config,
    tool_verbs,
)
from doc_processing_std_tools.launcher.compose.building import resolve_sources
from doc_processing_std_tools.launcher.config.schema import (
    BUILTIN_PROFILE_NAMES,
    LauncherConfig,
    load_config,
)
from helpers.paths import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w-]*)")
PARTIAL = "<!-- snippet: partial -->"
SHELL_LANGUAGES = {"bash", "console", "sh", "shell"}
MAX_PARTIAL = 3
ENV_VAR = re.compile(r"\$\{(\w+)")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    language: str
    text: str
    partial: bool

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def blocks(page: Path) -> Iterator[Block]:
    lines = page.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        indent, fence, language = opening.groups()
        before = [line for line in lines[:index] if line.strip()]
        partial = bool(before) and before[-1].strip() == PARTIAL
        body: list[str] = []
        end = index + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            body.append(lines[end][len(indent) :] if lines[end].startswith(indent) else lines[end])
            end += 1
        yield Block(page, index + 1, language.lower(), "\n".join(body) + "\n", partial)
        index = end + 1


ALL_BLOCKS = [block for page in PAGES for block in blocks(page)]


def is_launcher_config(block: Block) -> bool:
    return block.language == "yaml" and re.search(r"^servers:", block.text, re.M) is not None


CONFIGS = [block for block in ALL_BLOCKS if is_launcher_config(block)]


def test_the_pages_have_configs_and_few_are_partial() -> None:
    assert len(CONFIGS) >= 15, [block.where for block in CONFIGS]
    partial = [block.where for block in ALL_BLOCKS if block.partial]
    assert len(partial) <= MAX_PARTIAL, partial


def example_value(name: str, home: Path) -> str:
    """What a reader would have in ``$NAME``: a URL where the page wants one."""
    if name == "HOME":
        return str(home)
    if name.endswith("URL"):
        return "redis://127.0.0.1:6379/0"
    return f"doc-{name.lower()}"


def with_roots_made(settings: dict[str, Any], base: Path) -> dict[str, Any]:
    """The page's roots exist on the reader's machine: make them (absolute ones under *base*)."""
    roots = settings.get("roots")
    if not isinstance(roots, list):
        return settings
    made = []
    for root in roots:
        path = Path(root)
        path = base / "abs" / path.relative_to(path.anchor) if path.is_absolute() else base / path
        path.mkdir(parents=True, exist_ok=True)
        made.append(str(path))
    return {**settings, "roots": made}


@pytest.mark.parametrize("block", [b for b in CONFIGS if not b.partial], ids=lambda b: b.where)
def test_config_snippet_loads(block: Block, tmp_path: Path) -> None:
    file = tmp_path / "tools.yaml"
    file.write_text(block.text, encoding="utf-8")
    environ = {name: example_value(name, tmp_path) for name in ENV_VAR.findall(block.text)}
    loaded = load_config(file, environ)
    for name, entry in loaded.config.servers.items():
        if entry.module:  # (a package of the reader's, not installed here)
            loaded.config.servers[name] = entry.model_copy(update={"enabled": False})
    found, skipped = resolve_sources(loaded)
    for _name, entry, spec in found:
        if spec is not None:
            spec.validate_settings(with_roots_made(entry.settings, tmp_path), loaded.base_dir)
    # only an optional extra (popoto) may be missing here, never a misspelt server
    assert {name for name, _why in skipped} <= {"popoto-memory", "popoto"}, skipped


# -- fragments: a part of a config, shown alone ------------------------------------------------

FRAGMENT_BASE = "servers:\n  memory: {server: memory-tools}\n  filesystem: {}\n"
NOT_LAUNCHER_YAML = {"scrape_configs"}  # a Prometheus job (docs/scaling.md)


def fragment_config(block: Block) -> str | None:
    """The fragment as a whole config: its top-level keys beside two servers, or its
    ``servers:`` entries alone; None for YAML that is not a launcher config's."""
    data = yaml.safe_load(block.text)
    assert isinstance(data, dict), f"{block.where}: a YAML block that is not a mapping"
    if set(data) <= NOT_LAUNCHER_YAML:
        return None
    if set(data) <= set(LauncherConfig.model_fields):
        return block.text + FRAGMENT_BASE
    return "servers:\n" + "".join(f"  {line}\n" for line in block.text.splitlines())


FRAGMENTS = [
    block
    for block in ALL_BLOCKS
    if block.language == "yaml" and not block.partial and not is_launcher_config(block)
]


def test_the_pages_have_fragments() -> None:
    assert len(FRAGMENTS) >= 10, [block.where for block in FRAGMENTS]


@pytest.mark.parametrize("block", FRAGMENTS, ids=lambda b: b.where)
def test_config_fragment_loads(block: Block, tmp_path: Path) -> None:
    """A fragment (``access:``, ``profiles:``, a server's entry, ...) loads into a config."""
    text = fragment_config(block)
    if text is None:
        return
    file = tmp_path / "tools.yaml"
    file.write_text(text, encoding="utf-8")
    environ = {name: example_value(name, tmp_path) for name in ENV_VAR.findall(text)}
    loaded = load_config(file, environ)
    found, _skipped = resolve_sources(loaded)
    for _name, entry, spec in found:
        if spec is not None:
            spec.validate_settings(with_roots_made(entry.settings, tmp_path), loaded.base_dir)


# -- commands --------------------------------------------------------------------------------


def _plain(argv: list[str]) -> argparse.Namespace:
    return main.parse_args(argv)


PARSERS: dict[str, Callable[[list[str]], argparse.Namespace]] = {
    "tools": lambda argv: tool_verbs.parse("tools", argv, "tools.yaml"),
    "call": lambda argv: tool_verbs.parse("call", argv, "tools.yaml"),
    "client-config": lambda argv: client_config.parse(argv, "tools.yaml"),
    "init": starter_config.parse,
    "connect": connect.parse,
    "login": lambda argv: login.parse("login", argv, "tools.yaml"),
    "logout": lambda argv: login.parse("logout", argv, "tools.yaml"),
    "memory": memory_copy.parse,
    "pin": lambda argv: pins_verbs.parse("pin", argv, "tools.yaml"),
    "pins": lambda argv: pins_verbs.parse("pins", argv, "tools.yaml"),
}


def test_every_verb_has_a_parser_here() -> None:
    assert set(PARSERS) == set(main.VERBS)


def command_lines(block: Block) -> Iterator[str]:
    pending = ""
    for raw in block.text.splitlines():
        line = raw.strip()
        if block.language == "console":
            if not (line.startswith("$ ") or pending):
                continue
            line = line.removeprefix("$ ")
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        yield pending + line
        pending = ""


def is_punctuation(token: str) -> bool:
    return bool(token) and all(ch in "();<>|&" for ch in token)


def dpt_commands(line: str) -> Iterator[list[str]]:
    """Each ``dpt-launch ...`` invocation on a shell line, up to a pipe, ``;``, ``&&`` or ``>``."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        words = list(lexer)
    except ValueError:
        pytest.fail(f"unbalanced quotes in {line!r}")
    for start, word in enumerate(words):
        runs = start == 0 or words[start - 1] == "--" or is_punctuation(words[start - 1])
        if runs and (word == "dpt-launch" or word.endswith("/dpt-launch")):
            argv: list[str] = []
            for token in words[start + 1 :]:
                if is_punctuation(token):
                    break
                argv.append(token)
            yield argv


COMMANDS = [
    (block, argv)
    for block in ALL_BLOCKS
    if block.language in SHELL_LANGUAGES and not block.partial
    for line in command_lines(block)
    for argv in dpt_commands(line)
]


def test_the_pages_have_commands() -> None:
    assert len(COMMANDS) >= 20


@pytest.mark.parametrize(
    ("block", "argv"),
    COMMANDS,
    ids=[f"{block.where}:{shlex.join(argv)[:60]}" for block, argv in COMMANDS],
)
def test_command_parses(block: Block, argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    parse = PARSERS.get(argv[0], _plain) if argv else _plain
    args = argv[1:] if argv and argv[0] in PARSERS else argv
    try:
        parse(args)
    except SystemExit as exc:
        if exc.code not in (0, None):  # (--help, --version)
            pytest.fail(f"{block.where}: dpt-launch {shlex.join(argv)}: {capsys.readouterr().err}")


def client_entries(block: Block) -> Iterator[list[str]]:
    """The ``dpt-launch`` argv of each server entry of a client's JSON or TOML config."""
    if block.language == "json":
        data = json.loads(block.text)
        tables = [data.get("mcpServers"), data.get("servers")] if isinstance(data, dict) else []
    elif block.language == "toml":
        tables = [tomllib.loads(block.text).get("mcp_servers")]
    else:
        return
    for table in tables:
        for entry in (table or {}).values():
            command = entry.get("command", "") if isinstance(entry, dict) else ""
            if command == "dpt-launch" or command.endswith("/dpt-launch"):
                yield list(entry.get("args", []))


CLIENT_ENTRIES = [(block, argv) for block in ALL_BLOCKS for argv in client_entries(block)]


def test_the_pages_have_client_entries() -> None:
    assert len(CLIENT_ENTRIES) >= 6, [block.where for block, _ in CLIENT_ENTRIES]


@pytest.mark.parametrize(
    ("block", "argv"),
    CLIENT_ENTRIES,
    ids=[f"{block.where}:{shlex.join(argv)[:60]}" for block, argv in CLIENT_ENTRIES],
)
def test_client_entry_parses(
    block: Block, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A client's JSON/TOML entry runs a command line dpt-launch takes, with a known profile."""
    test_command_parses(block, argv, capsys)
    if "--profile" in argv:
        assert argv[argv.index("--profile") + 1] in BUILTIN_PROFILE_NAMES, block.where


def test_yaml_blocks_are_yaml() -> None:
    for block in ALL_BLOCKS:
        if block.language == "yaml" and not block.partial:
            yaml.safe_load(block.text)


def test_the_daemon_page_shows_the_entry_client_config_writes() -> None:
    page = REPO / "docs" / "daemon.md"
    shown = next(
        block for block in blocks(page) if block.language == "json" and '"connect"' in block.text
    )
    entry = json.loads(
        client_config.snippet(
            "claude-desktop",
            "dpt",
            None,
            "http://127.0.0.1:8765/mcp",
            "DPT_TOKEN",
            "claude-desktop",
        )
    )
    entry["mcpServers"]["dpt"]["command"] = "/abs/path/.venv/bin/dpt-launch"
    assert json.loads(shown.text) == entry
