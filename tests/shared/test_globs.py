"""globs: RE2-compiled globs agree with a slow, obviously-right oracle, and refuse oversize input."""

from __future__ import annotations

import fnmatch
import itertools
import re
from functools import cache

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from doc_processing_std_tools.shared.globs import (
    MAX_PATTERN_CHARS,
    MAX_PATTERNS,
    MAX_TOTAL_CHARS,
    GlobError,
    Globs,
    glob_match,
    translate,
)


def expand(pattern: str) -> list[str]:
    """Brace expansion (bash-like: a group needs a top-level comma), outermost group first."""
    depth, start, commas = 0, -1, []
    for i, c in enumerate(pattern):
        if c == "{":
            if depth == 0:
                start, commas = i, []
            depth += 1
        elif c == "," and depth == 1:
            commas.append(i)
        elif c == "}" and depth:
            depth -= 1
            if depth == 0 and commas:
                cuts = [start, *commas, i]
                return [
                    pattern[:start] + rest
                    for a, b in itertools.pairwise(cuts)
                    for rest in expand(pattern[a + 1 : b] + pattern[i + 1 :])
                ]
    return [pattern]


def oracle(relative: str, pattern: str) -> bool:
    """Expand braces, split into parts, fnmatch each part; ``**`` takes any number of parts."""
    parts = relative.split("/")
    for alternative in expand(pattern.removeprefix("./")):
        segments = [s for s in alternative.split("/") if s]

        @cache
        def match(i: int, j: int, segments: tuple[str, ...] = tuple(segments)) -> bool:
            if i == len(segments):
                return j == len(parts)
            if segments[i] == "**":
                return any(match(i + 1, k) for k in range(j, len(parts) + 1))
            regex = re.compile(fnmatch.translate(segments[i]), re.DOTALL)
            return j < len(parts) and bool(regex.match(parts[j])) and match(i + 1, j + 1)

        if match(0, 0):
            return True
    return False


PATTERNS = st.text(alphabet="ab*?/{},.", min_size=1, max_size=14).filter(
    # (no empty pattern, nor an alternative that is one: "{a,/}" holds "/", which the oracle's
    # "anywhere" reading turns into "**")
    lambda p: (
        all(alt.removeprefix("./").strip("/") for alt in expand(p))
        and not any(x in p for x in ("{,", ",}", ",,", "{}"))
    )
)
CLASS_PATTERNS = st.text(alphabet="ab*?/.[]!-", min_size=1, max_size=12).filter(
    lambda p: p.removeprefix("./").strip("/")
)
PATHS = st.lists(
    st.text(alphabet="ab.-{},[]!", min_size=1, max_size=4), min_size=1, max_size=4
).map("/".join)


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(PATTERNS, CLASS_PATTERNS), PATHS)
def test_globs_agree_with_the_oracle(pattern: str, relative: str) -> None:
    assert glob_match(relative, pattern) is oracle(relative, pattern)


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(PATTERNS, min_size=1, max_size=4), PATHS)
@example(["./?"], "[/[")  # found by hypothesis: the oracle read "**/./?" literally
def test_a_list_is_the_union_of_its_patterns(patterns: list[str], relative: str) -> None:
    assert Globs(patterns).match(relative) is any(oracle(relative, p) for p in patterns)
    # "anywhere": a pattern without * also matches that name at any depth, and below it
    anywhere = any(
        oracle(relative, p)
        or ("*" not in p and (oracle(relative, f"**/{bare}") or oracle(relative, f"**/{bare}/**")))
        for p in patterns
        for bare in [p.removeprefix("./")]  # "./?" anywhere is "?" anywhere
    )
    assert Globs(patterns, anywhere=True).match(relative) is anywhere


def test_braces_become_one_alternation_never_expanded() -> None:
    regex = translate("{a,b}" * 20)  # 2**20 alternatives if expanded
    assert len(regex) < 300
    assert glob_match("ab" * 10, "{a,b}" * 20) and not glob_match("c" * 20, "{a,b}" * 20)


def test_undecodable_names_match_one_character_per_byte() -> None:
    name = b"caf\xe9.txt".decode("utf-8", "surrogateescape")
    assert glob_match(name, "caf?.txt") and glob_match(f"dir/{name}", "**/*.txt")


def test_limits_are_refused_with_short_messages() -> None:
    with pytest.raises(GlobError, match=f"limit is {MAX_PATTERN_CHARS:,}") as too_long:
        Globs(["x" * 10_000_000])
    assert len(str(too_long.value)) < 400
    with pytest.raises(GlobError, match=f"the limit is {MAX_PATTERNS}"):
        Globs(["a"] * (MAX_PATTERNS + 1))
    with pytest.raises(GlobError, match=f"the limit is {MAX_TOTAL_CHARS:,}"):
        Globs(["y" * 4000] * 20)
