"""Print and publish benchmark figures: console rows, the figures file and its charts, and the
docs pages filled from it.

A figure is ``name -> value``. The name carries the unit in a trailing ``(ms)``,
``(calls/s)``, ``(s)``, ``(MB)``, ``(count)``..., or says ``ratio``; a target, when there is
one, is written in the name: ``(target <= 1.10)``, ``(target >= 0.90)``, ``(target 0)``.
``figures_file.py`` reads units and targets from names and describes the file.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import figures_file
import render_docs
from figures_file import Figure, target_of, unit_of

CHART_FOLDER = render_docs.CHART_FOLDER


@dataclass
class Section:
    """One section of a run: its figures, or a note saying why it has none."""

    key: str
    title: str
    figures: dict[str, float]
    note: str | None = None
    seconds: float = field(default=0.0)
    compared_with: Path | None = None  # the other checkout of a ``KEY@LABEL`` section
    finished: float = field(default_factory=time.time)  # when its figures were in


@dataclass
class Compared:
    """A section's figures on this checkout and, by label, the same figures of other checkouts
    measured in the same rounds (``run.py --compare``)."""

    figures: dict[str, float]
    others: dict[str, tuple[Path, dict[str, float]]]  # label -> (the checkout, its figures)


def met(name: str, value: float) -> bool | None:
    return Figure("", name, value, unit_of(name), target_of(name)).met


def print_figures(section: Section) -> None:
    if section.note:
        print(f"  {section.note}")
    for name, value in section.figures.items():
        verdict = "  (target missed)" if met(name, value) is False else ""
        shown = render_docs.formatted(Figure("", name, value, unit_of(name), None))
        print(f"  {name:<66} {shown}{verdict}")


UNIT_SLUGS = {"%": "percent", "µs": "us"}


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", UNIT_SLUGS.get(text, text).lower()).strip("-")


def write_report(
    sections: list[Section], figures_path: Path, *, quick: bool, rounds: int
) -> list[Path]:
    """Merge *sections* into the figures file at *figures_path* (each with its own run), draw
    the charts of every section it then holds, save it, and fill the docs pages from it when it
    is the docs' own file (``docs/performance/figures.json``). The paths written."""
    try:
        old = figures_file.load(figures_path)
    except figures_file.FiguresFileError:
        old = None  # none yet, or of the old format: this run starts it
    new = {
        section.key: figures_file.section_record(
            section.title,
            section.figures,
            section.note,
            figures_file.run_record(
                quick=quick,
                rounds=rounds,
                seconds=section.seconds,
                compared_with=section.compared_with,
                finished=section.finished,
            ),
        )
        for section in sections
    }
    return publish(figures_file.merged(old, new), figures_path)


def publish(data: dict, figures_path: Path) -> list[Path]:
    """Draw *data*'s charts beside *figures_path*, save it there and, when it is the docs' own
    file, fill the docs pages from it. The paths written."""
    folder = figures_path.parent
    folder.mkdir(parents=True, exist_ok=True)
    charts = draw_charts(data, folder)
    if charts is not None:  # matplotlib is there: the charts of every section, drawn again
        for old_chart in folder.glob("*.png"):
            if old_chart.name not in charts:
                old_chart.unlink()
        data["charts"] = [name for name in charts if name == "ratios.png"]
        for key, section in data["sections"].items():
            section["charts"] = [name for name, owner in charts.items() if owner == key]
    figures_file.save(data, figures_path)
    written = []
    if figures_path.resolve() == figures_file.FIGURES_FILE.resolve():
        written = render_docs.write(data)
    return [figures_path, *(folder / name for name in charts or {}), *written]


# -- charts --------------------------------------------------------------------------


def draw_charts(data: dict, folder: Path) -> dict[str, str] | None:
    """One chart of every ratio against its target, and one per section and unit (two figures
    or more): chart file name -> the section it belongs to (``""`` for the ratios). None
    without matplotlib (``pip install '.[bench]'``)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    charts: dict[str, str] = {}
    keys = [key for key in data["sections"] if "@" not in key]
    ratios = [
        (f"{found.name} ({key})", found.value, found.target)
        for key in keys
        for found in figures_file.figures_of(data, key)
        if found.unit == "ratio" and found.value == found.value
    ]
    if ratios:
        bar_chart(plt, ratios, folder / "ratios.png", "ratio (x)", "Ratios; the line is the target")
        charts["ratios.png"] = ""
    for key in keys:
        by_unit: dict[str, list[tuple[str, float, tuple[str, float] | None]]] = {}
        for found in figures_file.figures_of(data, key):
            if found.unit not in ("ratio", "") and found.value == found.value:
                by_unit.setdefault(found.unit, []).append((found.name, found.value, found.target))
        for unit, bars in by_unit.items():
            if len(bars) >= 2:
                name = f"{slug(key)}-{slug(unit)}.png"
                bar_chart(plt, bars, folder / name, unit, data["sections"][key]["title"])
                charts[name] = key
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
