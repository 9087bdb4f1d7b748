"""The figures file, ``docs/performance/figures.json``: every figure the docs quote, with where
it came from.

``benchmarks/run.py --report`` writes it; ``benchmarks/render_docs.py`` fills the docs' pages
from it, and ``tests/test_performance_figures.py`` checks them against it. The format::

    {
      "format": 2,
      "sections": {
        "<section key>": {
          "title": "3. write_memory+read_memory ...",
          "note": null,                      # or why it has no figures (skipped, failed)
          "run": {"date": "2026-12-07 10:00 UTC", "machine": "Linux ..., 2 CPUs, load ...",
                  "quick": true, "rounds": 3, "seconds": 41.2, "commit": "4f30e41",
                  "compared_with": null},    # on "<key>@<label>": the other checkout
          "charts": ["calls-calls-s.png"],   # drawn beside the file, named in the page
          "figures": {
            "<figure name>": {"value": 1.16, "unit": "ratio",
                              "target": {"op": ">=", "bound": 0.9}, "met": true}
          }
        }
      },
      "charts": ["ratios.png"]               # the charts of every section at once
    }

A section ``KEY@LABEL`` holds the same figures measured on another checkout in the same run
(``run.py --compare PATH --compare-label LABEL``), interleaved with ``KEY``'s.

A report of some sections (``run.py --only``) replaces those sections and keeps the others,
each with its own ``run``: the page says when and how each was measured. A section that was
skipped or failed does not replace one that was measured.
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
FIGURES_FILE = REPO / "docs" / "performance" / "figures.json"
FORMAT = 2

TARGET = re.compile(r"target\s*(<=|>=|≤|≥|=|==|<)?\s*([0-9][0-9_,]*(?:\.[0-9]+)?)")
PARENTHESES = re.compile(r"\(([^()]*)\)")
UNITS = {u: u for u in ("ms", "s", "µs", "calls/s", "MB", "KB", "GB", "%", "tokens")} | {"us": "µs"}
# units written in a name without parentheses, most specific first
NAMED_UNITS = (
    (re.compile(r"calls/s"), "calls/s"),
    (re.compile(r"\bms per call\b|\bms/call\b"), "ms"),
    (re.compile(r"\b(?:us|µs) per call\b"), "µs"),
    (re.compile(r"\bms$"), "ms"),
)


class FiguresFileError(Exception):
    """The figures file is missing, of another format, or lacks what a page asks of it."""


@dataclass(frozen=True)
class Figure:
    """One figure as the file holds it."""

    section: str
    name: str
    value: float
    unit: str
    target: tuple[str, float] | None

    @property
    def met(self) -> bool | None:
        if self.target is None or self.value != self.value:
            return None
        op, bound = self.target
        return self.value <= bound if op == "<=" else self.value >= bound


def unit_of(name: str) -> str:
    """``ratio``; else the unit in the name's last parentheses that hold one (``(ms)``,
    ``(s, target <= 1.0)``; ``(count)`` means none); else a unit the name spells out
    (``... calls/s``, ``CPU ms per call``); else ``""``."""
    if "ratio" in name:
        return "ratio"
    for group in reversed(PARENTHESES.findall(name)):
        unit = group.split(",")[0].strip()
        if unit == "count":
            return ""
        if unit in UNITS:
            return UNITS[unit]
    for pattern, unit in NAMED_UNITS:
        if pattern.search(name):
            return unit
    return ""


def target_of(name: str) -> tuple[str, float] | None:
    """(comparison, bound) of a ``target`` written in the name; ``target 0`` means ``<= 0``."""
    match = TARGET.search(name)
    if not match:
        return None
    op = {"≥": ">=", ">=": ">="}.get(match.group(1) or "", "<=")
    return op, float(match.group(2).replace(",", "").replace("_", ""))


def machine() -> str:
    """This machine as the page names it, with the load average at the time."""
    cpus = os.cpu_count() or 0
    try:
        load = ", load {:.1f}/{:.1f}/{:.1f}".format(*os.getloadavg())
    except OSError:
        load = ""
    return (
        f"{platform.system()} {platform.release()} {platform.machine()}, {cpus} CPUs{load}, "
        f"Python {platform.python_version()}"
    )


def commit_of(tree: Path) -> str | None:
    """The short commit of the checkout at *tree* (``+`` when its work tree has changes)."""
    try:
        head = subprocess.run(
            ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+" if dirty else "")


def run_record(
    *,
    quick: bool,
    rounds: int,
    seconds: float,
    compared_with: Path | None = None,
    finished: float | None = None,
) -> dict[str, Any]:
    """The ``run`` of a section measured now (its figures in at *finished*, a ``time.time()``)."""
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(finished)),
        "machine": machine(),
        "quick": quick,
        "rounds": rounds,
        "seconds": round(seconds, 1),
        "commit": commit_of(REPO),
        "compared_with": (
            None
            if compared_with is None
            else {"path": str(compared_with), "commit": commit_of(compared_with)}
        ),
    }


def figure_record(name: str, value: float) -> dict[str, Any]:
    target = target_of(name)
    figure = Figure("", name, float(value), unit_of(name), target)
    return {
        "value": None if value != value else float(value),  # NaN is no JSON
        "unit": figure.unit,
        "target": None if target is None else {"op": target[0], "bound": target[1]},
        "met": figure.met,
    }


def section_record(
    title: str,
    figures: dict[str, float],
    note: str | None,
    run: dict[str, Any],
    charts: list[str] | None = None,
) -> dict[str, Any]:
    return {
        "title": title,
        "note": note,
        "run": run,
        "charts": charts or [],
        "figures": {name: figure_record(name, value) for name, value in figures.items()},
    }


def base_key(key: str) -> str:
    """``in-flight`` of ``in-flight@before``."""
    return key.split("@", 1)[0]


def merged(old: dict[str, Any] | None, new: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """*old*'s sections with *new*'s in their place. A new section without figures (skipped,
    failed) keeps an old one that has them; a measured section drops the old ``KEY@LABEL``
    sections beside it (their pairing was with the old run)."""
    sections: dict[str, Any] = dict((old or {}).get("sections", {}))
    for key, section in new.items():
        if not section["figures"] and sections.get(key, {}).get("figures"):
            continue
        if section["figures"] and "@" not in key:
            for stale in [k for k in sections if "@" in k and base_key(k) == key]:
                if stale not in new:
                    del sections[stale]
        sections[key] = section
    return {"format": FORMAT, "sections": sections, "charts": (old or {}).get("charts", [])}


def load(path: Path = FIGURES_FILE) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise FiguresFileError(
            f"{path}: no figures file; write it with `python benchmarks/run.py --report`"
        ) from None
    if data.get("format") != FORMAT:
        raise FiguresFileError(
            f"{path}: format {data.get('format', 1)}, expected {FORMAT}; "
            "re-run `python benchmarks/run.py --report`"
        )
    return data


def save(data: dict[str, Any], path: Path = FIGURES_FILE) -> None:
    """Write *data* whole: a temp file, then ``os.replace``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    os.replace(partial, path)


def figure(data: dict[str, Any], section: str, name: str) -> Figure:
    """The figure *name* of *section*; :class:`FiguresFileError` saying which is missing."""
    found = data["sections"].get(section)
    if found is None:
        raise FiguresFileError(f"no section {section!r} in the figures file")
    entry = found["figures"].get(name)
    if entry is None:
        raise FiguresFileError(f"no figure {name!r} in section {section!r} of the figures file")
    target = entry["target"]
    value = float("nan") if entry["value"] is None else entry["value"]
    return Figure(
        section,
        name,
        value,
        entry["unit"],
        None if target is None else (target["op"], target["bound"]),
    )


def figures_of(data: dict[str, Any], section: str) -> list[Figure]:
    return [figure(data, section, name) for name in data["sections"][section]["figures"]]
