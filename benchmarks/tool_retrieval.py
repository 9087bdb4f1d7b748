"""Tool retrieval: does tool search find the tool an agent needs, and what does search mode save?

The catalog is the shipped ``configs/tools.yaml``'s tools (``fixtures/shipped_tools.json``, its
live list) plus tool definitions of the kind public MCP servers expose (GitHub, a Playwright
browser, Slack, Linear, Jira, Notion, Postgres, SQLite, Sentry, Google Drive, fetch, git, time,
everything: ``fixtures/external_tools.json``), under the names the launcher would expose. Each
query is a need phrased as an agent would, with the tool that meets it, in two sets:

- dev, ``fixtures/tool_queries.json`` (98): the ranker's improvements (synonyms, stemming,
  weights) were tuned against its figures and its misses;
- held-out, ``fixtures/tool_queries_heldout.json`` (61): written and committed before any such
  tuning, phrasings close to a dev query rewritten (word Jaccard >= 0.3), and never tuned against:
  its misses are printed only with ``--held-out-misses``, for reading after the fact. Its figures
  say how the ranker does on needs it was not fitted to. One caveat: the same author wrote the
  held-out queries and the ranker's lexicon (``compose/tool_vocabulary.py``), so both draw on
  one sense of how people word things, and the held-out figures may read somewhat high for
  phrasings from elsewhere.

The figures are given per set and for both together (the issue's recall@5 target is judged on
both). ``tests/helpers/tool_fixtures.py`` loads and checks the fixtures.

The ranker is the launcher's own:
``doc_processing_std_tools.launcher.compose.tool_search.search_catalog``, asked for the whole
ranking (``limit`` = the catalog's size), so recall@1 and recall@5 are its first 1 and 5
names and MRR is the mean of 1 / the rank of the first accepted tool (0 when it is missing).
Latency: indexing the catalog the first time (no word stemmed yet) and again, and one query
against that index (median and slowest over every query, best of 5 rounds).

Tokens are estimated as characters / 4 of each definition as a client hands it to a model:
compact JSON of its name, description, ``inputSchema`` and ``outputSchema``. Checked once
against OpenAI's tokenizers (cl100k_base and o200k_base, run offline with the bpe-openai
package, not a dependency): this catalog has 4.6-4.7 characters per token (4.0-5.4 per tool),
so the estimate reads about 15% high for them; the ratios do not depend on the divisor.
Search mode lists the pinned tools plus a search tool and a call tool; one search answers
with up to 5 full definitions. Figures: the full catalog's tokens, search mode's list, the mean
search answer over the queries, and what one request saves.

Run: ``python benchmarks/tool_retrieval.py [--quick]`` (figures, then the dev set's misses), or
``--regenerate`` to rewrite ``fixtures/shipped_tools.json`` from the live list.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tests"))  # tests/ holds the helpers benchmarks share

from helpers.tool_fixtures import (  # noqa: E402
    HELDOUT,
    QUERIES,
    SHIPPED,
    SHIPPED_CONFIG,
    accepted,
    exposed,
    live_shipped,
    load_catalog,
    load_queries,
    read,
)

SHOWN = 5  # what one search answers with, and the k of recall@k
PINNED = ("write_memory", "read_memory")  # the pins of issue 28's example profile
CHARS_PER_TOKEN = 4


def search_mode_tools() -> list[dict[str, Any]]:
    """The two tools search mode lists, as the launcher defines them (compose/profiles.py)."""
    from doc_processing_std_tools.launcher.compose.profiles import (
        Profile,
        call_tool_definition,
        search_tool_definition,
    )

    listed = [search_tool_definition(Profile(name="bench")), call_tool_definition()]
    return [{"outputSchema": None, **tool} for tool in listed]


Search = Callable[[Sequence[Any], str, int], list[str]]


def definition_tokens(tool: dict[str, Any]) -> float:
    """Estimated tokens of one definition: characters / 4 of its compact JSON."""
    shown = {key: tool[key] for key in ("name", "description", "inputSchema", "outputSchema")}
    return len(json.dumps(shown, separators=(",", ":"), ensure_ascii=False)) / CHARS_PER_TOKEN


def tokens(tools: Sequence[dict[str, Any]]) -> float:
    return sum(definition_tokens({"outputSchema": None, **tool}) for tool in tools)


@dataclass
class Outcome:
    query: dict[str, Any]
    ranking: list[str]

    @property
    def rank(self) -> int | None:
        """1-based rank of the first accepted tool, None when it is not ranked at all."""
        good = accepted(self.query)
        return next((i for i, name in enumerate(self.ranking, 1) if name in good), None)

    def found_within(self, k: int) -> bool:
        return self.rank is not None and self.rank <= k


def evaluate(
    search: Search, catalog: list[dict[str, Any]], queries: list[dict[str, Any]]
) -> list[Outcome]:
    return [Outcome(query, search(catalog, query["query"], len(catalog))) for query in queries]


def recall(outcomes: list[Outcome], k: int) -> float:
    return sum(o.found_within(k) for o in outcomes) / len(outcomes) if outcomes else float("nan")


def retrieval(outcomes: list[Outcome]) -> dict[str, float]:
    return {
        "recall@1": recall(outcomes, 1),
        f"recall@{SHOWN}": recall(outcomes, SHOWN),
        "MRR": statistics.mean(1 / o.rank if o.rank else 0.0 for o in outcomes),
    }


def measure(search: Search) -> tuple[dict[str, float], list[Outcome]]:
    """Figures of the dev set, the held-out set and both together (the issue's target is
    judged on both); the outcomes returned are both sets'."""
    catalog = load_catalog()
    dev = evaluate(search, catalog, load_queries(QUERIES))
    held_out = evaluate(search, catalog, load_queries(HELDOUT))
    outcomes = dev + held_out
    by_name = {tool["name"]: tool for tool in catalog}
    full = tokens(catalog)
    listed = tokens([by_name[name] for name in PINNED]) + tokens(search_mode_tools())
    answer = statistics.mean(
        tokens([by_name[name] for name in o.ranking[:SHOWN]]) for o in outcomes
    )
    figures: dict[str, float] = {
        "catalog: shipped config + external definitions (count)": len(catalog),
        "queries: dev (tuned on) (count)": len(dev),
        "queries: held-out (never tuned on) (count)": len(held_out),
    }
    for label, group in (("dev", dev), ("held-out", held_out)):
        figures |= {f"{label}: {name}": value for name, value in retrieval(group).items()}
    both = retrieval(outcomes)
    figures |= {
        "both sets: recall@1": both["recall@1"],
        f"both sets: recall@{SHOWN} (target >= 0.90)": both[f"recall@{SHOWN}"],
        "both sets: MRR": both["MRR"],
    }
    for kind in ("paraphrase", "no-overlap"):
        of_kind = [o for o in outcomes if o.query["kind"] == kind]
        figures[f"recall@{SHOWN} over the {len(of_kind)} {kind} queries"] = recall(of_kind, SHOWN)
    shipped = {tool["name"] for tool in exposed(read(SHIPPED)["servers"])}
    for group_name, members in (
        ("shipped", [o for o in outcomes if o.query["expected"] in shipped]),
        ("external", [o for o in outcomes if o.query["expected"] not in shipped]),
    ):
        figures[f"recall@{SHOWN} over the {len(members)} queries for {group_name} tools"] = recall(
            members, SHOWN
        )
    figures |= latency(catalog, [o.query["query"] for o in outcomes])
    figures |= {
        "full catalog, every definition (tokens)": full,
        f"search mode list: {len(PINNED)} pinned + search + call tools (tokens)": listed,
        f"one search answer, {SHOWN} definitions, mean over the queries (tokens)": answer,
        "search mode list + one search answer (tokens)": listed + answer,
        "tokens saved per request by search mode (tokens)": full - listed - answer,
        "search mode list + one answer / full catalog ratio": (listed + answer) / full,
    }
    return figures, outcomes


def latency(catalog: list[dict[str, Any]], queries: list[str]) -> dict[str, float]:
    """Milliseconds to index the catalog (first with no word stemmed yet, as in a fresh
    launcher, then again), and per query against that index (median and the slowest), best
    of a few rounds to shed the shared machine's noise."""
    from doc_processing_std_tools.launcher.compose.tool_search import CatalogIndex
    from doc_processing_std_tools.launcher.compose.tool_vocabulary import stem

    stem.cache_clear()
    start = time.perf_counter()
    CatalogIndex(catalog)
    cold = time.perf_counter() - start
    builds, per_query = [], []
    for _ in range(5):
        start = time.perf_counter()
        index = CatalogIndex(catalog)
        builds.append(time.perf_counter() - start)
        times = []
        for query in queries:
            start = time.perf_counter()
            index.search(query, SHOWN)
            times.append(time.perf_counter() - start)
        per_query.append(times)
    best = [min(round_[i] for round_ in per_query) for i in range(len(queries))]
    return {
        f"index the {len(catalog)} tools, first time (ms)": cold * 1000,
        f"index the {len(catalog)} tools again (ms)": min(builds) * 1000,
        "one query against the index, median (ms)": statistics.median(best) * 1000,
        "one query against the index, slowest (ms)": max(best) * 1000,
    }


def launcher_search() -> Search:
    from doc_processing_std_tools.launcher.compose.tool_search import search_catalog

    return search_catalog


def figures(quick: bool = False) -> dict[str, float]:
    """For benchmarks/run.py; the ranker is deterministic, so *quick* changes nothing."""
    found, outcomes = measure(launcher_search())
    print_misses(outcomes)
    return found


def print_misses(outcomes: list[Outcome], held_out: bool = False) -> None:
    """The dev set's misses; the held-out set's only when asked (they are not for tuning)."""
    if not held_out:
        outcomes = [o for o in outcomes if o.query in load_queries(QUERIES)]
    misses = [o for o in outcomes if not o.found_within(SHOWN)]
    which = "both sets" if held_out else "the dev set"
    print(f"  misses at {SHOWN} in {which}: {len(misses)} of {len(outcomes)}")
    for o in misses:
        where = f"rank {o.rank}" if o.rank else "not ranked"
        print(
            f"    {o.query['query']!r} ({o.query['kind']}): wanted {o.query['expected']} "
            f"({where}); got {', '.join(o.ranking[:3])}"
        )


def regenerate() -> int:
    servers, skipped = asyncio.run(live_shipped())
    if skipped:
        print(f"not written: {', '.join(skipped)} skipped (install '.[popoto]')", file=sys.stderr)
        return 1
    about = (
        f"The tools {SHIPPED_CONFIG.relative_to(REPO)} lists, as a client gets them (without "
        "fastmcp's _meta). Regenerate: python benchmarks/tool_retrieval.py --regenerate"
    )
    SHIPPED.write_text(json.dumps({"about": about, "servers": servers}, indent=1) + "\n")
    print(f"wrote {SHIPPED.relative_to(REPO)}: {sum(len(s['tools']) for s in servers)} tools")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the same run (it is cheap)")
    parser.add_argument(
        "--held-out-misses",
        action="store_true",
        help="list the held-out set's misses too (to read after tuning, never to tune by)",
    )
    parser.add_argument(
        "--regenerate", action="store_true", help=f"rewrite {SHIPPED.relative_to(REPO)}"
    )
    args = parser.parse_args(argv)
    if args.regenerate:
        return regenerate()
    from report import Section, print_figures

    try:
        search = launcher_search()
    except ImportError as exc:
        print(f"tool_retrieval: no tool search to measure ({exc})", file=sys.stderr)
        return 1
    found, outcomes = measure(search)
    print_figures(Section("tool_retrieval", "tool retrieval", found))
    print_misses(outcomes, held_out=args.held_out_misses)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    sys.exit(main())
