"""fastmcp's BM25 Okapi index over plain documents.

Pinned by ``tests/seams/``.
"""

from __future__ import annotations

from typing import Any

from fastmcp.server.transforms.search.bm25 import _BM25Index


def bm25_index(documents: list[str]) -> Any:
    """fastmcp's BM25 Okapi index (``transforms.search.bm25._BM25Index``) built over *documents*.

    Its ``query(text, top_k)`` returns the indices of the best-scoring documents, best first,
    only those with a positive score. The public ``BM25SearchTransform`` ranks only the tools of
    the server it wraps; a profile ranks the composition's exposed catalog.
    """
    index = _BM25Index()
    index.build(documents)
    return index
