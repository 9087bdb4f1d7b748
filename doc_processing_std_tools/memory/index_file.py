"""The saved copy of a memory folder's index: a compact binary file in the user cache.

Read back by the next launcher so that its first search need not read every file (it
still checks each one with a stat); any damage or foreign data reads as no index.
"""

from __future__ import annotations

from array import array
from itertools import repeat

from .index_entry import LARGE, NOT_UTF8, TEXT, UNREADABLE, IndexedEntry

INDEX_MAGIC = b"DPT-MEMORY-INDEX 4\n"

_SAVED_INTS = 6  # per saved entry: inode, size, mtime_ns, ctime_ns, kind, has a value


Listing = tuple[tuple[int, int, int], list[str]]  # the folder's (inode, mtime, ctime), names


def encode_index(
    entries: list[IndexedEntry], folder_id: tuple[int, int], listing: Listing | None = None
) -> bytes:
    """The entries with a sig (and the folder's listing), as: magic, header ints, 6 ints per
    entry, four text blobs.

    The blobs hold the names, the keys, the values and the listing's names, each joined by
    NUL (which no file name or key holds; entries whose value holds one are left out).
    Native byte order: a per-user cache, read back by the same machine.
    """
    saved = [
        e
        for e in entries
        if e.sig is not None and e.kind != UNREADABLE and not (e.value and "\0" in e.value)
    ]
    ints = array("q")
    for entry in saved:
        ints.extend(entry.sig)  # type: ignore[arg-type]
        ints.extend((entry.kind, entry.value is not None))
    blobs = [
        "\0".join(texts).encode("utf-8", "surrogatepass")
        for texts in (
            [e.name for e in saved],
            [e.key for e in saved],
            [e.value or "" for e in saved],
            listing[1] if listing else [],
        )
    ]
    folder_sig = listing[0] if listing else (-1, -1, -1)
    header = array("q", [*folder_id, *folder_sig, len(saved), *(len(blob) for blob in blobs)])
    return b"".join([INDEX_MAGIC, header.tobytes(), ints.tobytes(), *blobs])


def decode_index(
    data: bytes, folder_id: tuple[int, int]
) -> tuple[list[IndexedEntry], Listing | None]:
    """The entries and listing of :func:`encode_index`'s bytes; ValueError when foreign or
    damaged."""
    if not data.startswith(INDEX_MAGIC):
        raise ValueError("not an index")
    pos = len(INDEX_MAGIC)
    header = array("q", data[pos : pos + 80])
    pos += 80
    if len(header) != 10 or (header[0], header[1]) != folder_id:
        raise ValueError("another folder's index")
    folder_sig = (header[2], header[3], header[4])
    count, *sizes = header[5:]
    if count < 1 or min(sizes) < 0 or pos + 8 * _SAVED_INTS * count + sum(sizes) != len(data):
        raise ValueError("an empty or damaged index")
    ints = array("q", data[pos : pos + 8 * _SAVED_INTS * count])
    pos += len(ints) * 8
    texts = []
    for size in sizes:
        texts.append(data[pos : pos + size].decode("utf-8", "surrogatepass"))
        pos += size
    names, keys, values = (text.split("\0") for text in texts[:3])
    listing = (folder_sig, texts[3].split("\0") if texts[3] else []) if folder_sig[0] >= 0 else None
    folded_keys, folded_values = texts[1].casefold().split("\0"), texts[2].casefold().split("\0")
    if not len(names) == len(keys) == len(values) == len(folded_values) == count:
        raise ValueError("a damaged index")
    kinds, has_value = ints[4::_SAVED_INTS], ints[5::_SAVED_INTS]
    if not set(kinds) <= {TEXT, NOT_UTF8, LARGE}:
        raise ValueError("a damaged index")
    sigs = zip(*(ints[i::_SAVED_INTS] for i in range(4)), strict=True)
    kept = [v if has else None for v, has in zip(values, has_value, strict=True)]
    # A folded value equal to its value is the same object (half the memory).
    folded = [
        None if v is None else (v if f == v else f)
        for v, f in zip(kept, folded_values, strict=True)
    ]
    sizes_column = ints[1::_SAVED_INTS]
    rows = zip(names, sigs, kinds, keys, sizes_column, kept, folded_keys, folded, strict=True)
    return list(map(tuple.__new__, repeat(IndexedEntry), rows)), listing
