"""Static word embeddings for tool search: a sense of words no tool uses (the optional extra).

BM25 and the lexicon meet a query only through words a tool or the lexicon has; "bill Acme for
40 hours" never meets "Create an invoice". WordLlama's static embeddings (token vectors taken
from a large language model's embedding table and trained for sentence similarity, averaged
over a text) place such texts near each other. The model ships inside the ``wordllama`` wheel
(``pip install 'doc-processing-std-tools[semantic]'``: 33 MB, with numpy and tokenizers); it is
read from the package folder with downloads switched off, so nothing reaches a model hub.
Without the extra, tool search ranks with BM25 and the lexicon alone.
"""

from __future__ import annotations

import functools
import logging
import threading
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

_ENCODING = threading.Lock()  # the tokenizer and the weights are shared by every search


class Embedder:
    """Unit vectors of texts, and the cosine of a query with each of a catalog's texts."""

    def __init__(self, model: Any) -> None:
        self._model = model

    def vectors(self, texts: list[str]) -> Any:
        """A (texts x dimensions) array of unit vectors."""
        with _ENCODING:
            return self._model.embed(texts, norm=True)

    def similarities(self, vectors: Any, query: str) -> list[float]:
        """The cosine of *query* with each row of *vectors*."""
        with _ENCODING:
            found = self._model.embed([query], norm=True)[0]
        return [float(value) for value in vectors @ found]


@functools.cache
def embedder() -> Embedder | None:
    """The shipped WordLlama model, loaded once; None when the extra is not installed."""
    try:
        # Imported here, not at module level: wordllama and numpy take 0.18 s to import and the
        # model 0.08 s to load (measured), paid only by a launcher that searches its tools.
        import wordllama
    except ImportError:
        return None
    try:
        # The wheel ships its 256-dimension model in tokenizers/ and weights/ of its own folder;
        # naming that folder as the cache, downloads off, keeps it from asking a model hub.
        model = wordllama.WordLlama.load(
            cache_dir=Path(wordllama.__file__).parent, disable_download=True
        )
    except (OSError, ValueError) as exc:
        log.warning("tool search without embeddings: wordllama's model did not load (%s)", exc)
        return None
    return Embedder(model)
