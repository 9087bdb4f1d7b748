"""Rank a tool catalog against a natural-language query (a profile's search tool uses it).

BM25 over the text fastmcp's search transforms index (name, description, parameter names and
their descriptions), scored per field (BM25F): a word in a tool's name counts
:data:`NAME_WEIGHT` times one in its description, a word of a parameter
:data:`PARAMETER_WEIGHT` times, each field normalised by its own mean length, so a long list of
parameters neither drowns the name nor pads the description. fastmcp's own index
(``BM25SearchTransform``) cannot be used as it is: it ranks the tools of one server with one
field, while a profile ranks the composition's exposed catalog (after filters, collisions and
name shortening) and a benchmark ranks plain definitions. Before the text reaches the index:

- names are split into words (``read_memory``, ``readMemory``, ``fs-read``); a word split at a
  case change or a digit is kept whole too (``GitHub`` is ``github``, ``k8s`` is ``k8s``);
- English stop words are dropped (in a small catalog, "the" would otherwise rank a tool);
- every word is stemmed with Snowball's English stemmer (``files``/``file``,
  ``directories``/``directory``), so a query need not use the tool's own inflection;
- a parameter's ``enum`` values count as its words (``state: open|closed``);
- words and phrases also yield the concepts they name (``tool_vocabulary``: "forget" and
  "delete", "folder" and "directory"), so a query meets a tool that words the need differently;
  identifiers say what they name (``main.py`` a file, ``PAY-12`` an issue, ``#general`` a
  channel).

On the query's side:

- what it quotes, and what follows a colon, counts half: mostly the payload ("remember this:
  we chose Postgres"), not the need;
- the words inside an identifier (``PAY-12``, ``src/auth.py``, ``old_api_token``, ``#general``,
  an address) count a quarter: they name an instance ("PAY" is a ticket's project, not a need
  to pay), while the kind of thing they name still counts in full;
- a word no tool uses meets the tools' words that share its first five letters
  (``subscriber``/``subscription``), or the two it is made of (``rollback``: ``roll``, ``back``),
  at half weight.

With the ``semantic`` extra (``tool_embedding``), each tool's BM25 score, over the query's best,
is added to :data:`SEMANTIC_WEIGHT` times the cosine of static embeddings of the query's need
and of the tool's name, description and parameter names: a sense of words neither the catalog
nor the lexicon has ("bill" a customer, "create an invoice").

None of this is fitted to a catalog or a query set: ``benchmarks/tool_retrieval.py`` measures it
on a held-out set written by someone who never saw this module.
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .tool_embedding import embedder
from .tool_vocabulary import concept_tokens, entity_tokens
from .tool_vocabulary import stem as stem  # re-exported: the stemmer terms() applies

_RUN = re.compile(r"[^\W_]+")
# What a request quotes, or gives after a colon, is mostly its payload (a message, a value),
# not its need: "remember this: we chose Postgres" should not rank the Postgres tools first.
_PAYLOAD = re.compile(r"""(?<!\w)(?:'[^']*'|"[^"]*"|“[^”]*”|‘[^’]*’)(?!\w)|:\s.*$""")
_PAYLOAD_WEIGHT = 0.5  # a payload word against one of the need
# An identifier in a request: a word joined to another by _ / . @ or \, a #channel, an @user or
# a .ext, a ticket key. Its words name one instance ("PAY" in PAY-12), not the need.
_IDENTIFIER = re.compile(r"(?<!\S)\S*?\w[_/.@\\]\w\S*|(?<!\S)[#@.]\w\S*|\b[A-Z][A-Z0-9]+-\d+\b")
_IDENTIFIER_WEIGHT = 0.25
_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
NAME_WEIGHT = 3.0  # a word of the name against one of the description
PARAMETER_WEIGHT = 0.3  # a word of a parameter (name, description, enum) against one of it
_K1 = 1.5  # BM25's term-frequency saturation
_B = 0.75  # BM25's length normalisation (per field)
_PREFIX = 5  # letters a query word shares with a catalog word it stands for
_NEAR_WEIGHT = 0.5  # such a catalog word against the query's own
# With the embeddings extra, a tool's score is its BM25 score over the query's best one, plus
# this times the cosine of the query's and the tool's embeddings (tuned on the dev, old
# held-out and first fresh sets: 1 to 3 score alike; benchmarks/tool_retrieval.py).
SEMANTIC_WEIGHT = 2.0
# A tool none of the query's words meets is ranked when its cosine with the query reaches this
# (a gibberish or off-topic query stays under 0.2 with the shipped model; a need worded another
# way is over 0.25).
_SEMANTIC_FLOOR = 0.2
_STOP = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "can",
        "do",
        "for",
        "from",
        "have",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "me",
        "my",
        "of",
        "on",
        "or",
        "our",
        "should",
        "so",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "this",
        "to",
        "us",
        "was",
        "we",
        "what",
        "when",
        "where",
        "which",
        "who",
        "will",
        "with",
        "you",
        "your",
        "all",
        "any",
        "some",
        "please",
    ]
)


def terms(text: str) -> list[str]:
    """The stemmed, lower-case words of *text* but stop words; identifiers are split at ``_``,
    ``-`` and case changes."""
    words = (w.lower() for w in _WORD.findall(text))
    return [stem(w) for w in words if w not in _STOP]


def _words(text: str) -> tuple[list[str], list[str]]:
    """The stemmed terms of *text* but stop words (a run split at a case change or a digit
    also whole: ``GitHub``, ``k8s``), and every stem in order (for phrases)."""
    stems: list[str] = []
    kept: list[str] = []
    for run in _RUN.findall(text):
        parts = [w.lower() for w in _WORD.findall(run)]
        if len(parts) > 1:
            kept.append(stem(run.lower()))
        for word in parts:
            stems.append(stem(word))
            if word not in _STOP:
                kept.append(stems[-1])
    return kept, stems


def _tokens(text: str) -> list[str]:
    """What the index holds of *text*: its terms and the concepts its words, phrases and
    identifiers name."""
    kept, stems = _words(text)
    return [*kept, *concept_tokens(stems), *entity_tokens(text)]


def _field(tool: Any, *names: str) -> Any:
    for name in names:
        if isinstance(tool, Mapping):
            if name in tool:
                return tool[name]
        elif getattr(tool, name, None) is not None:
            return getattr(tool, name)
    return None


def tool_name(tool: Any) -> str:
    return str(_field(tool, "name") or "")


def tool_schema(tool: Any) -> dict[str, Any]:
    """The input schema of an ``mcp.types.Tool``, a fastmcp ``Tool`` or a ``dict`` definition."""
    schema = _field(tool, "input_schema", "parameters", "inputSchema")
    return schema if isinstance(schema, dict) else {}


def _parameter_text(tool: Any) -> str:
    """Parameter names, their descriptions and ``enum`` values."""
    parts: list[str] = []
    properties = tool_schema(tool).get("properties")
    if isinstance(properties, dict):
        for param, info in properties.items():
            parts.append(str(param))
            if isinstance(info, dict):
                if isinstance(info.get("description"), str):
                    parts.append(info["description"])
                if isinstance(info.get("enum"), list):
                    parts += [str(value) for value in info["enum"]]
    return " ".join(parts)


def _fields(tool: Any) -> tuple[list[str], list[str], list[str]]:
    """The index's tokens of a tool's name, description and parameters."""
    return (
        _tokens(tool_name(tool)),
        _tokens(str(_field(tool, "description") or "")),
        _tokens(_parameter_text(tool)),
    )


_FIELD_WEIGHTS = (NAME_WEIGHT, 1.0, PARAMETER_WEIGHT)


def _embedded_text(tool: Any) -> str:
    """What the embeddings read of a tool: its name's words, description, parameter names."""
    properties = tool_schema(tool).get("properties")
    parameters = list(properties) if isinstance(properties, dict) else []
    name = " ".join(w.lower() for w in _WORD.findall(tool_name(tool)))
    named = " ".join(" ".join(w.lower() for w in _WORD.findall(str(p))) for p in parameters)
    return f"{name}. {_field(tool, 'description') or ''} {named}"


class CatalogIndex:
    """A BM25F index over one catalog; build it once, query it as often as needed."""

    def __init__(self, tools: Iterable[Any]) -> None:
        listed = list(tools)
        self.names = [tool_name(t) for t in listed]
        documents = [_fields(t) for t in listed]
        count = len(documents)
        mean = [
            max(1.0, sum(len(d[f]) for d in documents) / count) if count else 1.0
            for f in range(len(_FIELD_WEIGHTS))
        ]
        frequencies: list[dict[str, float]] = []
        documents_with: dict[str, int] = {}
        for document in documents:
            weighted: dict[str, float] = {}
            for f, tokens in enumerate(document):
                share = _FIELD_WEIGHTS[f] / (1 - _B + _B * len(tokens) / mean[f])
                for token in tokens:
                    weighted[token] = weighted.get(token, 0.0) + share
            frequencies.append(weighted)
            for token in weighted:
                documents_with[token] = documents_with.get(token, 0) + 1
        # term -> (tool, its BM25 score for the term); a query sums its terms' postings
        self._postings: dict[str, list[tuple[int, float]]] = {}
        for i, weighted in enumerate(frequencies):
            for token, tf in weighted.items():
                df = documents_with[token]
                idf = math.log(1 + (count - df + 0.5) / (df + 0.5))
                score = idf * tf * (_K1 + 1) / (_K1 + tf)
                self._postings.setdefault(token, []).append((i, score))
        self._embedder = embedder()
        self._vectors = (
            self._embedder.vectors([_embedded_text(t) for t in listed])
            if self._embedder is not None and listed
            else None
        )
        self._by_prefix: dict[str, list[str]] = {}
        for token in self._postings:
            if len(token) >= _PREFIX and token.isalpha():
                self._by_prefix.setdefault(token[:_PREFIX], []).append(token)

    def _near(self, token: str) -> list[str]:
        """Catalog words for a query word no tool uses: those sharing its first letters, else
        the two it is made of."""
        if not token.isalpha() or token.startswith("syn"):
            return []
        if len(token) >= _PREFIX:
            found = [o for o in self._by_prefix.get(token[:_PREFIX], ()) if o != token]
            if found:
                return found
        for cut in range(3, len(token) - 2):
            head, tail = token[:cut], stem(token[cut:])
            if head in self._postings and tail in self._postings:
                return [head, tail]
        return []

    def weights(self, query: str) -> dict[str, float]:
        """The query's terms, each with its weight (need, payload, identifier, near word)."""
        need = _PAYLOAD.sub(" ", query)
        payload = " ".join(m.group(0) for m in _PAYLOAD.finditer(query))
        identifiers = " ".join(m.group(0) for m in _IDENTIFIER.finditer(need))
        found: dict[str, float] = {}

        def add(tokens: Iterable[str], weight: float) -> None:
            for token in tokens:
                found[token] = found.get(token, 0.0) + weight

        for text, weight, concepts in (
            (_IDENTIFIER.sub(" ", need), 1.0, 1.0),
            (identifiers, _IDENTIFIER_WEIGHT, 0.0),
            (payload, _PAYLOAD_WEIGHT, _PAYLOAD_WEIGHT),
        ):
            kept, stems = _words(text)
            add(kept, weight)
            add(concept_tokens(stems), concepts)
        add(entity_tokens(need), 1.0)
        add(entity_tokens(payload), _PAYLOAD_WEIGHT)
        for token, weight in list(found.items()):
            if token not in self._postings:
                near = self._near(token)
                add(near, weight * _NEAR_WEIGHT / math.sqrt(len(near) or 1))
        return found

    def search(self, query: str, limit: int = 5) -> list[str]:
        """Exposed names of the best matches, best first; none when no word of *query* matches
        (with embeddings: none when it is near no tool in meaning either)."""
        if limit <= 0 or not self.names:
            return []
        weights = self.weights(query)
        scores: dict[int, float] = {}
        for token, weight in weights.items():
            for i, score in self._postings.get(token, ()):
                scores[i] = scores.get(i, 0.0) + weight * score
        if self._embedder is not None and weights:
            need = _PAYLOAD.sub(" ", query)  # as for the words: the payload is not the need
            near = self._embedder.similarities(self._vectors, need if need.strip() else query)
            best = max(scores.values(), default=0.0)
            # a tool no word of the query meets is ranked only when near it in meaning
            scores = {
                i: (scores.get(i, 0.0) / best if best > 0 else 0.0) + SEMANTIC_WEIGHT * cosine
                for i, cosine in enumerate(near)
                if i in scores or cosine >= _SEMANTIC_FLOOR
            }
            ranked = sorted(scores, key=lambda i: (-scores[i], i))[:limit]
            return [self.names[i] for i in ranked]
        ranked = sorted(scores, key=lambda i: (-scores[i], i))[:limit]
        return [self.names[i] for i in ranked if scores[i] > 0]


_CACHED = threading.Lock()
# The indexes of the catalogs last searched, the latest last: each profile (and each caller its
# access cuts the catalog for) searches a catalog of its own, again and again.
_INDEXES: OrderedDict[str, CatalogIndex] = OrderedDict()
KEPT_INDEXES = 4


def _catalog_key(tools: Sequence[Any]) -> str:
    return json.dumps(
        [[tool_name(t), str(_field(t, "description") or ""), tool_schema(t)] for t in tools],
        sort_keys=True,
        default=str,
    )


def search_catalog(tools: Sequence[Any], query: str, limit: int = 5) -> list[str]:
    """Exposed names of the best-matching tools, best first (names, descriptions, parameters).
    *tools* are ``mcp.types.Tool`` objects, fastmcp ``Tool`` objects or dicts with ``name``,
    ``description`` and ``inputSchema``. The indexes of the last few catalogs are kept
    (:data:`KEPT_INDEXES`), so profiles searching by turns do not build theirs each time."""
    key = _catalog_key(tools)
    with _CACHED:
        index = _INDEXES.get(key)
        if index is not None:
            _INDEXES.move_to_end(key)
    if index is None:
        index = CatalogIndex(tools)
        with _CACHED:
            _INDEXES[key] = index
            while len(_INDEXES) > KEPT_INDEXES:
                _INDEXES.popitem(last=False)
    return index.search(query, limit)
