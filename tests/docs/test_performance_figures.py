"""The docs quote measured figures only from the figures file (docs/performance/figures.json).

``benchmarks/run.py --report`` writes the file and ``benchmarks/render_docs.py`` fills every
marker and generated block of the docs from it. Here: each page is what the file makes of it (a
number edited by hand inside a marker fails), and no page quotes a measured-looking number
outside a marker (a number typed into the prose fails), except the phrases listed below, each a
setting, a limit or a workload, not a measurement.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from helpers.paths import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import figures_file
import render_docs

DOCS = REPO / "docs"
PERFORMANCE = DOCS / "performance.md"

# A number with a unit that measurements have. Elsewhere than performance.md, seconds and sizes
# are mostly settings and limits (timeouts, caps), so only these units count there.
MEASURED = re.compile(r"(?<![\w.@/-])(\d[\d,]*(?:\.\d+)?)\s?(ms\b|µs|calls/s|/s\b|×|x\b|%|times\b)")
MEASURED_HERE = re.compile(  # performance.md: every unit, and m:ss times
    r"(?<![\w.@/-])(\d[\d,]*(?:\.\d+)?)\s?(ms\b|µs|calls/s|/s\b|×|x\b|%|times\b|s\b|MB\b|"
    r"GB\b|KB\b|tokens\b|minutes?\b|seconds?\b)|(?<![\w:])\d+:\d\d\b"
)
# A bound, not a measurement: "≥ 0.90", "under 2 ms", "at most 30 ms".
BOUND_BEFORE = re.compile(r"(≥|≤|>=|<=|<|>|under|at most|at least|over|past|per)\s*$")
# (page, phrase): quoted numbers that are settings, limits or workloads, each with its reason.
ALLOWED = {
    # the retry rule's threshold in memory-tools (a constant in the code)
    ("guarantees.md", "under 2 ms of CPU"),
    ("servers/memory-tools.md", "under 2 ms of CPU"),
    # the histograms' bucket bounds (constants in telemetry/metrics.py)
    ("scaling.md", "buckets 0.5 ms to 60 s"),
    ("scaling.md", "buckets 0.1 ms to 60 s"),
    # Claude Code's documented threshold, and the profile setting derived from it
    ("clients.md", "past 10% of the context"),
    ("clients.md", "(10% of 200k)"),
    ("clients.md", "the 10% threshold"),
    # the ranker's field weights (constants in tool_search.py)
    ("performance.md", "a name word 3×, a parameter word 0.3× a description"),
    # the test suite's target
    ("performance.md", "3:00"),
}


def figures_data() -> dict:
    return figures_file.load()


def blank(match: re.Match[str]) -> str:
    """What replaces a stripped part: its line breaks, so line numbers still hold."""
    return "\n" * match.group(0).count("\n") or " "


def stripped(text: str) -> str:
    """*text* without what cannot be a quoted measurement: code, comments, link targets and the
    figures rendered from the file (markers and generated blocks)."""
    text = render_docs.BLOCK.sub(blank, text)
    text = render_docs.INLINE.sub("FIGURE", text)
    text = re.sub(r"^(```|~~~).*?^\1", blank, text, flags=re.DOTALL | re.MULTILINE)
    text = re.sub(r"<!--.*?-->", blank, text, flags=re.DOTALL)
    text = re.sub(r"``.*?``|`[^`\n]*`", "CODE", text)
    return re.sub(r"\]\([^)]*\)", "]", text)


def typed_numbers(page: Path, text: str) -> list[str]:
    """The measured-looking numbers of *text* (the page *page*) outside rendered figures."""
    name = page.relative_to(DOCS).as_posix()
    body = stripped(text)
    for where, phrase in ALLOWED:
        if where == name:
            body = body.replace(phrase, "ALLOWED")
    pattern = MEASURED_HERE if page == PERFORMANCE else MEASURED
    found = []
    for match in pattern.finditer(body):
        if BOUND_BEFORE.search(body[max(0, match.start() - 12) : match.start()]):
            continue
        line = body.count("\n", 0, match.start()) + 1
        found.append(f"{name}:{line}: {match.group(0)!r}")
    return found


def test_every_page_is_what_the_figures_file_makes_of_it() -> None:
    assert render_docs.check(figures_data()) == []


def test_no_page_quotes_a_measured_number_outside_a_figure() -> None:
    typed = [
        number
        for page in sorted(DOCS.rglob("*.md"))
        for number in typed_numbers(page, page.read_text())
    ]
    assert typed == [], "quote these from the figures file (render_docs.py's markers):\n" + (
        "\n".join(typed)
    )


def test_every_allowed_phrase_is_still_there() -> None:
    """An allowance whose phrase left its page would let a new number through unseen."""
    gone = [
        (page, phrase)
        for page, phrase in sorted(ALLOWED)
        if phrase not in stripped((DOCS / page).read_text())
    ]
    assert gone == []


def test_a_number_edited_by_hand_fails() -> None:
    """Both ways a hand edit can go: inside a marker (the page no longer renders to itself) and
    typed into the prose (the scan finds it)."""
    data = figures_data()
    text = PERFORMANCE.read_text()
    marker = render_docs.INLINE.search(text)
    assert marker is not None
    edited = text[: marker.start("shown")] + "0.93×" + text[marker.end("shown") :]
    assert edited != text
    assert render_docs.render(edited, data).text != edited
    prose = text.replace("## Targets", "The relayed-call ratio is 0.93× here.\n\n## Targets", 1)
    assert any("0.93×" in found for found in typed_numbers(PERFORMANCE, prose))


def test_a_figure_the_file_lacks_is_reported() -> None:
    data = figures_data()
    section = next(key for key, s in data["sections"].items() if s["figures"])
    page = f"a ratio of <!--fig {section}: no such figure-->1.00×<!--/fig--> here"
    rendered = render_docs.render(page, data)
    assert rendered.missing and "no such figure" in rendered.missing[0]


def test_no_marker_starts_a_line() -> None:
    """Markdown reads a line that starts with ``<!--`` as an HTML block: the paragraph breaks."""
    starting = [
        f"{page.relative_to(REPO)}:{number}"
        for page in sorted(DOCS.rglob("*.md"))
        for number, line in enumerate(page.read_text().splitlines(), start=1)
        if line.lstrip().startswith("<!--fig ")
    ]
    assert starting == []


def test_every_section_of_the_file_has_its_table_on_the_page() -> None:
    data = figures_data()
    blocks = {
        match.group("arg")
        for match in render_docs.BLOCK.finditer(PERFORMANCE.read_text())
        if match.group("kind") == "section"
    }
    sections = {figures_file.base_key(key) for key in data["sections"]}
    assert sections - blocks == set()


def test_each_figure_says_where_it_came_from() -> None:
    data = figures_data()
    assert data["format"] == figures_file.FORMAT
    for key, section in data["sections"].items():
        run = section["run"]
        assert run["date"] and run["machine"] and isinstance(run["quick"], bool), key
        for name, figure in section["figures"].items():
            assert set(figure) == {"value", "unit", "target", "met"}, (key, name)
            assert figure["target"] is None or figure["target"]["op"] in ("<=", ">="), name


@pytest.mark.parametrize(
    ("name", "unit", "target"),
    [
        ("calls/s launcher / alone ratio (target >= 0.90)", "ratio", (">=", 0.9)),
        ("search_memory 10k keys cold, no saved index (ms)", "ms", None),
        (
            "directory_tree, 100 brace excludePatterns, 10,000 entries (s, target <= 1.0)",
            "s",
            ("<=", 1.0),
        ),
        ("list+search peak RSS with a 1 GB entry (MB) (target < 200)", "MB", ("<=", 200.0)),
        ("external stdio tool: dpt-launch's own CPU ms per call", "ms", None),
        ("in isolation: metrics, CPU us per call", "µs", None),
        ("queries: dev (tuned on) (count)", "", None),
        ("search_memory 10k keys index saved at exit (1 = yes)", "", None),
    ],
)
def test_units_and_targets_come_from_the_names(
    name: str, unit: str, target: tuple[str, float] | None
) -> None:
    assert figures_file.unit_of(name) == unit
    assert figures_file.target_of(name) == target


def test_a_report_of_some_sections_keeps_the_others() -> None:
    """``run.py --only`` merges: a skipped section keeps the measured one, a re-measured section
    drops the comparison that was paired with the old run."""
    run = figures_file.run_record(quick=True, rounds=3, seconds=1.0)
    old = figures_file.merged(
        None,
        {
            "calls": figures_file.section_record("calls", {"a (ms)": 1.0}, None, run),
            "in-flight": figures_file.section_record("in-flight", {"b (ms)": 2.0}, None, run),
            "in-flight@before": figures_file.section_record("b", {"b (ms)": 3.0}, None, run),
        },
    )
    new = figures_file.merged(
        old,
        {
            "calls": figures_file.section_record("calls", {}, "skipped: no popoto", run),
            "in-flight": figures_file.section_record("in-flight", {"b (ms)": 4.0}, None, run),
        },
    )
    assert new["sections"]["calls"]["figures"]["a (ms)"]["value"] == 1.0
    assert new["sections"]["in-flight"]["figures"]["b (ms)"]["value"] == 4.0
    assert "in-flight@before" not in new["sections"]
