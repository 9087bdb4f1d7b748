"""Print and publish benchmark figures: console rows, ``docs/performance.md`` and its charts.

A figure is ``name -> value``. The name carries the unit in a trailing ``(ms)``,
``(calls/s)``, ``(s)``, ``(MB)``, ``(count)``..., or says ``ratio``; a target, when there is
one, is written in the name: ``(target <= 1.10)``, ``(target >= 0.90)``, ``(target 0)``.
"""

from __future__ import annotations

import json
import os
import platform
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

TARGET = re.compile(r"target\s*(<=|>=|≤|≥|=|==)?\s*([0-9][0-9_,]*(?:\.[0-9]+)?)")
UNIT = re.compile(r"\(([^()]*)\)\s*$")
CHART_FOLDER = "performance"  # beside the page: docs/performance/*.png


@dataclass
class Section:
    """One section of a run: its figures, or a note saying why it has none."""

    key: str
    title: str
    figures: dict[str, float]
    note: str | None = None
    seconds: float = field(default=0.0)


def unit_of(name: str) -> str:
    """``ratio``, or the unit in the name's last parentheses (``ms``, ``calls/s``...), or ``""``."""
    if "ratio" in name:
        return "ratio"
    match = UNIT.search(name)
    if not match:
        return ""
    unit = match.group(1).split(",")[0].strip()
    return "" if unit.startswith("target") or unit == "count" or len(unit) > 12 else unit


def target_of(name: str) -> tuple[str, float] | None:
    """(comparison, bound) of a ``target`` written in the name; ``target 0`` means ``<= 0``."""
    match = TARGET.search(name)
    if not match:
        return None
    op = {"≥": ">=", ">=": ">="}.get(match.group(1) or "", "<=")
    return op, float(match.group(2).replace(",", "").replace("_", ""))


def met(name: str, value: float) -> bool | None:
    target = target_of(name)
    if target is None:
        return None
    op, bound = target
    return value <= bound if op == "<=" else value >= bound


def formatted(name: str, value: float) -> str:
    unit = unit_of(name)
    if unit == "ratio":
        return f"{value:.2f}x"
    if value != value:  # NaN
        return "n/a"
    text = f"{value:,.0f}" if abs(value) >= 100 or value == int(value) else f"{value:.2f}"
    return f"{text} {unit}".strip()


def print_figures(section: Section) -> None:
    if section.note:
        print(f"  {section.note}")
    for name, value in section.figures.items():
        verdict = {True: "", False: "  (target missed)", None: ""}[met(name, value)]
        print(f"  {name:<66} {formatted(name, value)}{verdict}")


# -- the page ------------------------------------------------------------------------


def machine() -> str:
    cpus = os.cpu_count() or 0
    try:
        load = ", load {:.1f}/{:.1f}/{:.1f}".format(*os.getloadavg())
    except OSError:
        load = ""
    return (
        f"{platform.system()} {platform.release()} {platform.machine()}, {cpus} CPUs{load}, "
        f"Python {platform.python_version()}"
    )


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


# From this line on, docs/performance.md is written by hand and kept by every new report.
KEPT_MARK = "<!-- kept by benchmarks/run.py --report: measured by hand -->"


def write_report(
    sections: list[Section], path: Path, *, quick: bool, rounds: int, elapsed: float
) -> list[Path]:
    """Write the page, its charts (when matplotlib is installed) and figures.json; the paths."""
    folder = path.parent / CHART_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.png"):
        old.unlink()
    charts = draw_charts(sections, folder)
    figures_json = folder / "figures.json"
    figures_json.write_text(
        json.dumps(
            {s.key: {"title": s.title, "note": s.note, "figures": s.figures} for s in sections},
            indent=2,
        )
        + "\n"
    )
    kept = ""  # what is measured by hand (the test suite's time) survives a new report
    if path.exists() and KEPT_MARK in (old_page := path.read_text()):
        kept = "\n" + old_page[old_page.index(KEPT_MARK) :]
    path.write_text(page(sections, charts, quick=quick, rounds=rounds, elapsed=elapsed) + kept)
    return [path, *charts.values(), figures_json]


def page(
    sections: list[Section], charts: dict[str, Path], *, quick: bool, rounds: int, elapsed: float
) -> str:
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    kind = (
        f"a **quick run** (`--quick`: {rounds} rounds per comparison), so read it as indicative"
        if quick
        else f"a full run ({rounds} rounds per comparison)"
    )
    lines = [
        "# Performance",
        "",
        "Every figure printed by `python benchmarks/run.py`, with the targets of issue 12.",
        "Comparisons run side by side in one run (interleaved rounds, medians), so read the",
        "ratios rather than the absolute numbers. Regenerate this page with",
        "`python benchmarks/run.py --report` (charts need `pip install '.[bench]'`).",
        "",
        f'!!! note "This page: {when}"',
        f"    This is {kind}; it took {elapsed:.0f} s on {machine()}. The machine was shared",
        "    with other jobs, which inflates absolute times; the maintainers re-measure on an",
        "    idle machine before a release.",
        "",
    ]
    targeted = [
        (section, name, value)
        for section in sections
        for name, value in section.figures.items()
        if target_of(name) is not None
    ]
    if targeted:
        lines += [
            "## Targets",
            "",
            "| figure | measured | target | met |",
            "|---|---:|---|:---:|",
        ]
        for section, name, value in targeted:
            op, bound = target_of(name)  # type: ignore[misc]
            mark = "yes" if met(name, value) else "**no**"
            lines.append(
                f"| {escape(name)} ({section.key}) | {formatted(name, value)} | {op} {bound:g} | {mark} |"
            )
        lines.append("")
        if "ratios" in charts:
            lines += [
                f"![Ratios against their targets]({CHART_FOLDER}/{charts['ratios'].name})",
                "",
            ]
    lines += ["## Every figure", ""]
    for section in sections:
        lines += [f"### {escape(section.title)}", ""]
        if section.note:
            lines += [f"*{escape(section.note)}*", ""]
        if section.figures:
            lines += ["| figure | value |", "|---|---:|"]
            lines += [
                f"| {escape(name)} | {formatted(name, value)} |"
                for name, value in section.figures.items()
            ]
            lines.append("")
        for key, chart in charts.items():
            if key.startswith(section.key + ":"):
                lines += [f"![{escape(section.title)}]({CHART_FOLDER}/{chart.name})", ""]
    if not charts:
        lines += ["*No charts: matplotlib is not installed (`pip install '.[bench]'`).*", ""]
    lines += [
        "The raw figures of this run are in",
        f"[`{CHART_FOLDER}/figures.json`]({CHART_FOLDER}/figures.json).",
        "",
    ]
    return "\n".join(lines)


def escape(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


# -- charts --------------------------------------------------------------------------


def draw_charts(sections: list[Section], folder: Path) -> dict[str, Path]:
    """One chart of every ratio against its target, and one per section and unit."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return {}
    charts: dict[str, Path] = {}
    ratios = [
        (f"{name} ({section.key})", value, target_of(name))
        for section in sections
        for name, value in section.figures.items()
        if unit_of(name) == "ratio"
    ]
    if ratios:
        charts["ratios"] = bar_chart(
            plt, ratios, folder / "ratios.png", "ratio (x)", "Ratios; the line is the target"
        )
    for section in sections:
        by_unit: dict[str, list[tuple[str, float, tuple[str, float] | None]]] = {}
        for name, value in section.figures.items():
            unit = unit_of(name)
            if unit not in ("ratio", ""):
                by_unit.setdefault(unit, []).append((name, value, target_of(name)))
        for unit, bars in by_unit.items():
            if len(bars) < 2:
                continue
            file = folder / f"{slug(section.key)}-{slug(unit)}.png"
            charts[f"{section.key}:{unit}"] = bar_chart(plt, bars, file, unit, section.title)
    return charts


def bar_chart(
    plt: object,
    bars: list[tuple[str, float, tuple[str, float] | None]],
    file: Path,
    unit: str,
    title: str,
) -> Path:
    """Horizontal bars, one per figure; a target is drawn as a vertical tick on its bar."""
    import textwrap

    labels = ["\n".join(textwrap.wrap(name, 60)) for name, _, _ in bars]
    values = [value for _, value, _ in bars]
    height = 0.55 * sum(label.count("\n") + 1 for label in labels) + 1.2
    fig, ax = plt.subplots(figsize=(10, height))  # type: ignore[attr-defined]
    colors = []
    for name, value, target in bars:
        if target is None:
            colors.append("#4c72b0")
        else:
            colors.append("#55a868" if met(name, value) else "#c44e52")
    positions = range(len(bars))
    ax.barh(list(positions), values, color=colors)
    for y, (_, value, target) in zip(positions, bars, strict=True):
        if target is not None:
            ax.plot([target[1], target[1]], [y - 0.4, y + 0.4], color="black", linewidth=2)
        ax.annotate(
            f" {value:.2f}" if unit.startswith("ratio") or abs(value) < 10 else f" {value:,.0f}",
            (value, y),
            va="center",
            fontsize=8,
        )
    ax.set_yticks(list(positions), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(unit)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(file, dpi=90)
    plt.close(fig)  # type: ignore[attr-defined]
    return file
