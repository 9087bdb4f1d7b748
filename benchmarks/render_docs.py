"""Fill the docs' figures from the figures file (``docs/performance/figures.json``), without
measuring anything.

A page quotes a figure with a marker around the text it shows, which this script rewrites::

    the launcher's own CPU per call is <!--fig external: external stdio tool: dpt-launch's own CPU ms per call-->0.25 ms<!--/fig-->

``SECTION: NAME`` names the figure (the section key, then the figure's name, as in the file);
an optional ``[OPTIONS]`` after the name changes how it is shown: ``bare`` (no unit), ``d0``
to ``d3`` (decimals), ``sign`` (a ``+`` before a positive value), ``mmss`` (seconds as
``m:ss``). A marker must not start a line: Markdown would read it as an HTML block.

Generated blocks sit between ``<!--figures:KIND ARG-->`` and ``<!--/figures-->`` on lines of
their own: ``runs`` (which run measured each section), ``targets`` (every figure with a
target), ``section KEY`` (a section's table, its note and charts; a ``KEY@LABEL`` section of a
compared checkout becomes a column).

Run: ``python benchmarks/render_docs.py`` (rewrites the pages that differ) or ``--check``
(exit 1 and say which pages differ or quote a figure the file lacks; what
``tests/test_performance_figures.py`` checks). ``benchmarks/run.py --report`` runs it.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from figures_file import (
    FIGURES_FILE,
    REPO,
    Figure,
    FiguresFileError,
    base_key,
    figure,
    figures_of,
    load,
)

DOCS = REPO / "docs"
CHART_FOLDER = "performance"  # beside performance.md
INLINE = re.compile(r"<!--fig (?P<ref>.+?)-->(?P<shown>.*?)<!--/fig-->")
REF = re.compile(r"^(?P<section>[^:\s]+): (?P<name>.+?)(?: \[(?P<options>[a-z0-9 ]+)\])?$")
BLOCK = re.compile(
    r"^<!--figures:(?P<kind>[a-z]+)(?: (?P<arg>[^>]*?))?-->\n.*?^<!--/figures-->$",
    re.DOTALL | re.MULTILINE,
)
OPTIONS = {"bare", "sign", "mmss", "d0", "d1", "d2", "d3"}


@dataclass
class Rendered:
    """A page as the figures file makes it, and what it quotes that the file lacks."""

    text: str
    missing: list[str] = field(default_factory=list)  # a figure of a measured section: a typo
    unmeasured: list[str] = field(default_factory=list)  # a section skipped or never run


def formatted(found: Figure, options: frozenset[str] = frozenset()) -> str:
    """*found*'s value as a page shows it: ``1.16×``, ``92 ms``, ``1,508 ms``, ``11.9%``."""
    value = found.value
    if value != value:
        return "n/a"
    if "mmss" in options:
        minutes, seconds = divmod(round(value), 60)
        return f"{minutes}:{seconds:02d}"
    digits = next((int(o[1]) for o in options if re.fullmatch(r"d[0-3]", o)), None)
    if digits is None:
        digits = 2 if found.unit == "ratio" or (abs(value) < 100 and value != int(value)) else 0
    text = f"{value:{'+' if 'sign' in options else ''},.{digits}f}"
    if "bare" in options or not found.unit:
        return text
    if found.unit == "ratio":
        return f"{text}×"
    return f"{text}%" if found.unit == "%" else f"{text} {found.unit}"


def escape(text: str) -> str:
    """Text for a table cell: no column break, no HTML."""
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def target_text(found: Figure) -> str:
    if found.target is None:
        return ""
    op, bound = found.target
    return f"{'≤' if op == '<=' else '≥'} {bound:g}"


# -- generated blocks ----------------------------------------------------------------


def run_line(run: dict[str, Any]) -> str:
    kind = f"quick run (`--quick`, {run['rounds']} rounds)" if run["quick"] else "full run"
    at = f" at `{run['commit']}`" if run.get("commit") else ""
    return f"{run['date']}, {kind}{at}, {run['seconds']:.0f} s"


def block_runs(data: dict[str, Any]) -> list[str]:
    lines = ["| section | measured | machine |", "|---|---|---|"]
    for key, section in data["sections"].items():
        run = section["run"]
        other = run.get("compared_with")
        what = run_line(run) + (
            f"; the checkout at `{other['path']}` (`{other['commit']}`)" if other else ""
        )
        if section["note"]:
            what += f"; {section['note']}"
        lines.append(f"| `{key}` | {escape(what)} | {escape(run['machine'])} |")
    return lines


def block_targets(data: dict[str, Any]) -> list[str]:
    lines = ["| figure | section | measured | target | met |", "|---|---|---:|---|:---:|"]
    for key in data["sections"]:
        if "@" in key:
            continue
        for found in figures_of(data, key):
            if found.target is None:
                continue
            mark = {True: "yes", False: "**no**", None: "n/a"}[found.met]
            lines.append(
                f"| {escape(found.name)} | `{key}` | {formatted(found)} | "
                f"{target_text(found)} | {mark} |"
            )
    if data.get("charts"):
        lines += ["", f"![Ratios against their targets]({CHART_FOLDER}/{data['charts'][0]})"]
    return lines


def block_section(data: dict[str, Any], key: str, prefix: str) -> list[str]:
    section = data["sections"].get(key)
    if section is None:
        return [f"*Not measured yet: no section `{key}` in the figures file.*"]
    compared = [k for k in data["sections"] if "@" in k and base_key(k) == key]
    lines = [f"*{escape(run_line(section['run']))}.*"]
    if section["note"]:
        lines += ["", f"*{escape(section['note'])}*"]
    if section["figures"]:
        heads = ["figure", "value"] + [
            escape(f"{k.split('@', 1)[1]} (`{commit_at(data, k)}`)") for k in compared
        ]
        lines += ["", "| " + " | ".join(heads) + " |", "|---|" + "---:|" * (len(heads) - 1)]
        for found in figures_of(data, key):
            cells = [escape(found.name), formatted(found)]
            for other in compared:
                there = data["sections"][other]["figures"]
                cells.append(
                    formatted(figure(data, other, found.name)) if found.name in there else ""
                )
            lines.append("| " + " | ".join(cells) + " |")
    for chart in section.get("charts", []):
        lines += ["", f"![{escape(section['title'])}]({prefix}{CHART_FOLDER}/{chart})"]
    return lines


def commit_at(data: dict[str, Any], key: str) -> str:
    other = data["sections"][key]["run"].get("compared_with") or {}
    return str(other.get("commit") or "?")


def render_block(data: dict[str, Any], kind: str, arg: str | None, prefix: str) -> list[str]:
    if kind == "runs":
        return block_runs(data)
    if kind == "targets":
        return block_targets(data)
    if kind == "section" and arg:
        return block_section(data, arg, prefix)
    raise FiguresFileError(f"unknown block <!--figures:{kind} {arg or ''}-->")


# -- a page --------------------------------------------------------------------------


def render(text: str, data: dict[str, Any], prefix: str = "") -> Rendered:
    """*text* with every marker's figure and every block filled from *data*. *prefix* leads
    from the page's folder to ``docs/`` (the charts' folder is ``docs/performance/``)."""
    out = Rendered(text)

    def block(match: re.Match[str]) -> str:
        kind, arg = match.group("kind"), match.group("arg")
        head = f"<!--figures:{kind}{' ' + arg if arg else ''}-->"
        body = render_block(data, kind, arg, prefix)
        return "\n".join([head, "", *body, "", "<!--/figures-->"])

    def inline(match: re.Match[str]) -> str:
        ref = REF.match(match.group("ref"))
        if ref is None:
            out.missing.append(f"unreadable marker <!--fig {match.group('ref')}-->")
            return match.group(0)
        section, name = ref.group("section"), ref.group("name")
        options = frozenset((ref.group("options") or "").split())
        if options - OPTIONS:
            out.missing.append(f"unknown options {sorted(options - OPTIONS)} in {match.group(0)}")
        try:
            shown = formatted(figure(data, section, name), options)
        except FiguresFileError as exc:
            measured = data["sections"].get(section, {}).get("figures")
            (out.missing if measured else out.unmeasured).append(str(exc))
            shown = "n/a"
        return f"<!--fig {match.group('ref')}-->{shown}<!--/fig-->"

    out.text = INLINE.sub(inline, BLOCK.sub(block, text))
    return out


def pages() -> list[Path]:
    """Every docs page with a marker or a block."""
    return sorted(
        page
        for page in DOCS.rglob("*.md")
        if "<!--fig " in (text := page.read_text()) or "<!--figures:" in text
    )


def prefix_of(page: Path) -> str:
    return "../" * (len(page.relative_to(DOCS).parts) - 1)


def check(data: dict[str, Any]) -> list[str]:
    """What is wrong with the pages against *data*: one line each, with the first changed line."""
    problems = []
    for page in pages():
        text = page.read_text()
        got = render(text, data, prefix_of(page))
        where = page.relative_to(REPO)
        problems += [f"{where}: {missing}" for missing in got.missing]
        if got.text != text:
            diff = [
                line
                for line in difflib.unified_diff(text.splitlines(), got.text.splitlines(), n=0)
                if line[:1] in "+-" and not line.startswith(("+++", "---"))
            ]
            problems.append(
                f"{where}: differs from the figures file; first change: {' / '.join(diff[:2])}"
            )
    return problems


def write(data: dict[str, Any]) -> list[Path]:
    """Rewrite the pages that differ from *data*; the pages written."""
    written = []
    for page in pages():
        text = page.read_text()
        got = render(text, data, prefix_of(page))
        for line in got.missing + got.unmeasured:
            print(f"{page.relative_to(REPO)}: {line}", file=sys.stderr)
        if got.text != text:
            page.write_text(got.text)
            written.append(page)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 on a diff")
    parser.add_argument("--figures", type=Path, default=FIGURES_FILE, help="the figures file")
    args = parser.parse_args(argv)
    try:
        data = load(args.figures)
    except FiguresFileError as exc:
        print(f"render_docs: {exc}", file=sys.stderr)
        return 2
    if args.check:
        problems = check(data)
        for line in problems:
            print(line, file=sys.stderr)
        return 1 if problems else 0
    for page in write(data):
        print(f"rendered {page.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
