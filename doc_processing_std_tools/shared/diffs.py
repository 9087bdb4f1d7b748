"""Unified diffs of big files in bounded time.

``difflib.unified_diff`` can take tens of seconds on a file of 150,000 lines with
a few scattered changes (its ``SequenceMatcher`` rescans the whole range for every
change), and it gives up on files of repeated lines (its "junk" heuristic turns
one changed line of ``"a\\n" * 200_000`` into a diff of the whole file). Here
the lines are aligned first by their common prefix and suffix and by lines that
occur once on each side (patience diff); ``difflib`` then aligns only the small
gaps left between those anchors. A gap too big for that is shown as replaced
whole: still a correct diff, never a slow one.
"""

from __future__ import annotations

import bisect
import difflib
from collections import Counter
from collections.abc import Iterator, Sequence

# difflib aligns a gap only when (lines before) x (lines after) is at most this.
SMALL_GAP = 40_000

Block = tuple[int, int, int]  # (start in a, start in b, length) of equal lines
Opcode = tuple[str, int, int, int, int]


def _longest_increasing(pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The longest run of *pairs* (sorted by first item) whose second items increase."""
    tails: list[int] = []  # tails[k]: smallest second item ending a run of length k+1
    tail_index: list[int] = []
    previous: list[int] = [-1] * len(pairs)
    for index, (_i, j) in enumerate(pairs):
        k = bisect.bisect_left(tails, j)
        if k == len(tails):
            tails.append(j)
            tail_index.append(index)
        else:
            tails[k] = j
            tail_index[k] = index
        previous[index] = tail_index[k - 1] if k else -1
    run = []
    index = tail_index[-1] if tail_index else -1
    while index >= 0:
        run.append(pairs[index])
        index = previous[index]
    return run[::-1]


def matching_blocks(a: Sequence[str], b: Sequence[str]) -> list[Block]:
    """Blocks of equal lines, in order (no recursion; time about linear for edits)."""
    found: list[Block] = []
    pending = [(0, len(a), 0, len(b))]
    while pending:
        alo, ahi, blo, bhi = pending.pop()
        while alo < ahi and blo < bhi and a[alo] == b[blo]:
            found.append((alo, blo, 1))
            alo += 1
            blo += 1
        while alo < ahi and blo < bhi and a[ahi - 1] == b[bhi - 1]:
            ahi -= 1
            bhi -= 1
            found.append((ahi, bhi, 1))
        if alo == ahi or blo == bhi:
            continue
        if (ahi - alo) * (bhi - blo) <= SMALL_GAP:
            matcher = difflib.SequenceMatcher(None, a[alo:ahi], b[blo:bhi], autojunk=False)
            found += [(alo + i, blo + j, n) for i, j, n in matcher.get_matching_blocks() if n]
            continue
        count_a = Counter(a[alo:ahi])
        count_b = Counter(b[blo:bhi])
        where_b = {line: j for j, line in enumerate(b[blo:bhi], blo) if count_b[line] == 1}
        pairs = [
            (i, where_b[line])
            for i, line in enumerate(a[alo:ahi], alo)
            if count_a[line] == 1 and line in where_b
        ]
        anchors = _longest_increasing(pairs)
        if not anchors:
            continue  # nothing to align on: the gap is shown as replaced whole
        start_a, start_b = alo, blo
        for i, j in anchors:
            pending.append((start_a, i, start_b, j))
            found.append((i, j, 1))
            start_a, start_b = i + 1, j + 1
        pending.append((start_a, ahi, start_b, bhi))
    found.sort()
    merged: list[Block] = []
    for i, j, n in found:
        if merged and merged[-1][0] + merged[-1][2] == i and merged[-1][1] + merged[-1][2] == j:
            merged[-1] = (merged[-1][0], merged[-1][1], merged[-1][2] + n)
        else:
            merged.append((i, j, n))
    return merged


def opcodes(a: Sequence[str], b: Sequence[str]) -> list[Opcode]:
    """``SequenceMatcher.get_opcodes`` for :func:`matching_blocks`."""
    result: list[Opcode] = []
    i = j = 0
    for ai, bj, size in [*matching_blocks(a, b), (len(a), len(b), 0)]:
        tag = "replace" if i < ai and j < bj else "delete" if i < ai else "insert" if j < bj else ""
        if tag:
            result.append((tag, i, ai, j, bj))
        i, j = ai + size, bj + size
        if size:
            result.append(("equal", ai, i, bj, j))
    return result


def _range(start: int, stop: int) -> str:
    """A hunk range as ``difflib`` writes it (line numbers from 1; an empty range names the
    line before it)."""
    beginning = start + 1
    length = stop - start
    if length == 1:
        return str(beginning)
    if not length:
        beginning -= 1
    return f"{beginning},{length}"


def unified_lines(
    a: Sequence[str], b: Sequence[str], fromfile: str, tofile: str, fromdate: str, todate: str
) -> Iterator[str]:
    """The lines of ``difflib.unified_diff(a, b, ...)`` with 3 lines of context."""
    matcher = difflib.SequenceMatcher(None, "", "")
    matcher.opcodes = opcodes(a, b)  # type: ignore[attr-defined]  # get_grouped_opcodes reads them
    started = False
    for group in matcher.get_grouped_opcodes(3):
        if not started:
            started = True
            yield f"--- {fromfile}\t{fromdate}\n"
            yield f"+++ {tofile}\t{todate}\n"
        first, last = group[0], group[-1]
        yield f"@@ -{_range(first[1], last[2])} +{_range(first[3], last[4])} @@\n"
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                yield from (" " + line for line in a[i1:i2])
                continue
            if tag in ("replace", "delete"):
                yield from ("-" + line for line in a[i1:i2])
            if tag in ("replace", "insert"):
                yield from ("+" + line for line in b[j1:j2])
