"""KeywordExpander: more words for the keyword (BM25) side of retrieval — synonyms, related terms.

BM25 finds only the words a question uses; "Who founded the Yuan dynasty?" misses a passage that
says "Kublai Khan established the Yuan". Expansion searches with more words and fuses the lists
(:func:`expanded_sparse_search`). ``queries`` comes out as the question first, then the expansions
(deduplicated, never empty); ``terms`` lists the words the expansions add; ``failed`` says why no
expansion was added (``None`` exactly when ``queries`` holds more than the question). Two backends:

* ``"prf"`` — pseudo-relevance feedback (no LLM, a few milliseconds): BM25 retrieves the top
  ``feedback_docs`` chunks, each of their terms is weighted by its IDF times its frequency in those
  chunks (each chunk counted by its share of the feedback's BM25 score, the frequency relative to the
  chunk's length: relevance model RM1 with an IDF factor), and the ``n_terms`` best terms not already
  in the question are appended to it as one expanded query. Terms are the index's own (stemmed,
  stopwords dropped: bm25s's list and ragkit's longer one) and come out in the commonest surface form the feedback chunks use, so the
  expanded query re-tokenises to exactly those terms and reads as words.
* ``"llm"`` — the LLM writes ``n_expansions`` alternative queries (one bounded call). A reply that
  cannot be parsed, a refusal, an expansion that only repeats the question, a failed call or the
  question's deadline leave the question alone, with ``failed`` set and the fallback traced.

Why not Haystack's ``QueryExpander`` itself. Its prompt and its ``{"queries": [...]}`` reply format are
kept (pass ``prompt_template=haystack.components.query.query_expander.DEFAULT_PROMPT_TEMPLATE`` to use
its prompt verbatim), but the component cannot be wrapped: it calls ``chat_generator.run(messages)``
with no per-call ``generation_kwargs``, so neither a llama.cpp grammar nor a small ``max_tokens`` can
be set for this one call without changing the chat generator the grader and the answer share; it logs and
swallows every failure, returning the bare question, so a failure cannot be told from "nothing to
add" or traced; and it puts the question last. Here the call goes through
:func:`ragkit.llm.structured.call_llm` (deadline, reply bound, trace) under a GBNF grammar that
admits only ``{"queries": ["…", "…"]}`` with exactly ``n_expansions`` strings of at most
``MAX_EXPANSION_WORDS`` words (a JSON schema for OpenAI-compatible servers), so a 0.5B cannot
answer in prose, code fences or a different shape — a prompt only asks for the JSON, the grammar
makes anything else impossible. The default prompt is a short one (273 characters, about 70 tokens,
against 1,308 characters, about 330 tokens, for Haystack's: the 0.5B reads ~220 prompt tokens/s on
2 cores, so the long prompt would add ~1 s a question with a cold cache); its fixed part is the
system message, so llama.cpp can reuse it across questions. Which prompt expands better is
measured, not assumed: ``bench/expansion.py --backends llm,llm_haystack``.
Haystack's ``MultiQueryTextRetriever`` is not used for the search either: it merges the lists by raw
score, and an expanded BM25 query (more terms, more to add up) tends to score higher than the question
whatever it matches, so the expansion's list would bury the question's. :func:`expanded_sparse_search` fuses by rank with
Haystack's ``DocumentJoiner(join_mode="reciprocal_rank_fusion")`` or by each list's share of its best
score (as :class:`~ragkit.components.score_fusion.HybridScoreJoiner` does).

Usage::

    expander = KeywordExpander(backend="prf", index_path=".ragkit/index")
    out = expander.run(query="Who founded the Yuan dynasty?")
    out["queries"], out["terms"], out["failed"]
    docs = expanded_sparse_search(index, out["queries"], top_k=10)
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from dataclasses import replace
from typing import Any, Optional

from haystack import Document, component, default_from_dict, default_to_dict
from haystack.components.joiners import DocumentJoiner
from haystack.dataclasses import ChatMessage

from ragkit.components.score_fusion import scaled_scores
from ragkit.eval.metrics import STOPWORDS, content_words
from ragkit.index.handle import IndexHandle
from ragkit.index.store import RagIndex
from ragkit.llm.structured import backend_of, call_llm, gbnf_grammar, generator_from_dict, generator_to_dict
from ragkit.pipeline.trace import record

EXPAND_BACKENDS = ("prf", "llm")
FUSIONS = ("rrf", "scaled_sum")
MAX_EXPANSION_WORDS = 8
MAX_WORD_CHARS = 24
# bm25s's default token pattern (lower-cased): the surface words of a chunk, as its tokenizer splits them
_BM25_TOKEN = re.compile(r"(?u)\b\w\w+\b")
_REFUSAL = re.compile(r"^\s*(?:i'?m sorry|sorry|i apologi[sz]e|i (?:cannot|can't|can not|am unable|won't)|as an ai\b)", re.I)
EXPAND_SYSTEM = (
    "You expand search queries for a keyword search engine. Write {{ n_expansions }} short alternative queries "
    "(at most 8 words each) that use synonyms, related terms and the words a passage answering the query "
    "would contain. Keep names. Reply only with JSON: {\"queries\": [...]}"
)


def _normal(text: str) -> str:
    return " ".join(text.lower().split())


def expansion_grammar(n: int) -> str:
    """GBNF: ``{"queries": [...]}`` with exactly ``n`` strings of 1..MAX_EXPANSION_WORDS words, single
    spaces, no quote, backslash or control character (so every string is valid JSON as written)."""
    items = ' ", " '.join(["item"] * n)
    return "\n".join([
        f'root ::= "{{\\"queries\\": [" {items} "]}}"',
        f'item ::= "\\"" word (" " word){{0,{MAX_EXPANSION_WORDS - 1}}} "\\""',
        f'word ::= [^" \\\\\\x00-\\x1f]{{1,{MAX_WORD_CHARS}}}',
    ])


def expansion_constraint(chat_generator: Any, n: int) -> dict[str, Any]:
    """generation_kwargs that make only a ``{"queries": [n strings]}`` reply possible."""
    kind = backend_of(chat_generator)
    if kind == "llama.cpp":
        return {"grammar": gbnf_grammar(expansion_grammar(n))}
    if kind == "openai":
        schema = {
            "type": "object",
            "properties": {"queries": {"type": "array", "items": {"type": "string"}, "minItems": n, "maxItems": n}},
            "required": ["queries"],
            "additionalProperties": False,
        }
        return {"response_format": {"type": "json_schema", "json_schema": {"name": "query_expansion", "strict": True, "schema": schema}}}
    return {}


def _reply_strings(text: str) -> list[Any]:
    """The ``queries`` list of a reply: JSON (bare or in a code fence); else the complete strings of
    a reply that was cut at max_tokens after ``{"queries": [``."""
    stripped = text.strip()
    fenced = re.search(r"```(?:json)?\s*(.*?)```", stripped, re.S)
    if fenced:
        stripped = fenced.group(1).strip()
    try:
        loaded = json.loads(stripped)
    except json.JSONDecodeError:
        head = re.match(r'\s*\{\s*"queries"\s*:\s*\[', stripped)
        if not head:
            if _REFUSAL.match(stripped):
                raise ValueError(f"the model refused: {text[:80]!r}") from None
            raise ValueError(f"no {{\"queries\": [...]}} in {text[:80]!r}") from None
        return [json.loads(m) for m in re.findall(r'"(?:[^"\\]|\\.)*"', stripped[head.end():])]
    if isinstance(loaded, list):
        return loaded
    if not isinstance(loaded, dict) or not isinstance(loaded.get("queries"), list):
        raise ValueError(f"expected {{\"queries\": [...]}}, got {text[:80]!r}")
    return loaded["queries"]


def parse_expansions(text: str, query: str, n: int) -> list[str]:
    """At most ``n`` usable expansions of ``query`` from a reply, in order; ValueError if none.

    An expansion is dropped when it is not a string, has no word, runs past
    ``MAX_EXPANSION_WORDS`` words (babble), opens like a refusal, or repeats the question or an
    earlier expansion (case and spacing ignored)."""
    seen = {_normal(query)}
    kept: list[str] = []
    for item in _reply_strings(text):
        if not isinstance(item, str):
            continue
        candidate = " ".join(item.split()).strip(" \"'")
        if not _BM25_TOKEN.search(candidate) or len(candidate.split()) > MAX_EXPANSION_WORDS or _REFUSAL.match(candidate):
            continue
        if _normal(candidate) in seen:
            continue
        seen.add(_normal(candidate))
        kept.append(candidate)
    if not kept:
        raise ValueError(f"no usable expansion (empty, refusals or repeats of the question) in {text[:80]!r}")
    return kept[:n]


def added_words(query: str, expansions: list[str]) -> list[str]:
    """Content words of the expansions that the question does not use, first-seen order."""
    have = set(content_words(query))
    out: list[str] = []
    for expansion in expansions:
        for word in content_words(expansion):
            if word not in have:
                have.add(word)
                out.append(word)
    return out


def feedback_terms(index: RagIndex, query: str, feedback: list[Document], n_terms: int) -> list[str]:
    """The ``n_terms`` best expansion words from the ``feedback`` chunks (best first), each a surface
    word whose index term the question does not have. Weight of a term t: idf(t) · Σ_d w_d · tf(t, d) / |d|,
    w_d the chunk's share of the feedback's BM25 score, |d| its number of terms."""
    # bm25s's English stopword list is short ("his", "also" are index terms); ragkit's longer one keeps them out
    words_per_doc = [[w for w in _BM25_TOKEN.findall((d.content or "").lower()) if w not in STOPWORDS] for d in feedback]
    vocabulary = sorted({w for words in words_per_doc for w in words})
    if not vocabulary or n_terms < 1:
        return []
    # one batched call: each surface word → its index term (stemmed; a stopword has none)
    term_of = {w: next(iter(t)) for w, t in zip(vocabulary, index.terms(vocabulary)) if len(t) == 1}
    idf = index.term_weights(" ".join(term_of))
    have = set().union(*index.terms([query])) if query.strip() else set()
    scores = [max(float(d.score or 0.0), 0.0) for d in feedback]
    total = sum(scores)
    shares = [s / total for s in scores] if total > 0 else [1.0 / len(feedback)] * len(feedback)
    weight: dict[str, float] = defaultdict(float)
    surface: dict[str, Counter] = defaultdict(Counter)
    for share, words in zip(shares, words_per_doc):
        terms = [(w, term_of[w]) for w in words if w in term_of]
        if not terms:
            continue
        for word, term in terms:
            weight[term] += share / len(terms)
            surface[term][word] += 1
    ranked = sorted(
        (t for t in weight if t not in have and t in idf),
        key=lambda t: (-weight[t] * idf[t], t),  # the term itself breaks ties: deterministic
    )
    # the commonest surface form; shortest, then alphabetical, among equals
    return [min(surface[t].items(), key=lambda kv: (-kv[1], len(kv[0]), kv[0]))[0] for t in ranked[:n_terms]]


# -- searching with the expansions -----------------------------------------------------------------
def _bm25(index: RagIndex, query: str, top_k: int, filters: Optional[dict]) -> list[Document]:
    return index.sparse_search(query, top_k, filters=filters) if filters else index.sparse_search(query, top_k)


def sparse_lists(index: RagIndex, queries: list[str], depth: int, filters: Optional[dict] = None) -> list[list[Document]]:
    """BM25's ``depth`` best chunks for each distinct query, in the queries' order (the question's
    first: callers read confidence signals off that one, whose scores are plain BM25). ``filters``:
    the index's metadata filter (:mod:`ragkit.index.filters`), applied to every query alike."""
    distinct = list(dict.fromkeys(q for q in queries if q and q.strip()))
    return [_bm25(index, q, depth, filters) for q in distinct]


def fuse_lists(lists: list[list[Document]], top_k: int, fusion: str = "rrf", original_weight: Optional[float] = None) -> list[Document]:
    """One ranking from the question's list (first) and the expansions' lists.

    ``"rrf"``: Haystack's ``DocumentJoiner`` reciprocal rank fusion; ``"scaled_sum"``: each list's
    scores divided by its best, summed with the weights (a chunk a list did not return adds 0).
    ``original_weight``: the question's list's share of the weight (None: all lists equal)."""
    if fusion not in FUSIONS:
        raise ValueError(f"fusion must be one of {FUSIONS}, not {fusion!r}")
    if not lists or top_k < 1:
        return []
    if len(lists) == 1:
        return lists[0][:top_k]
    if original_weight is None:
        weights = [1.0 / len(lists)] * len(lists)
    else:
        if not 0 < original_weight < 1:
            raise ValueError("original_weight must be in (0, 1)")
        weights = [original_weight] + [(1 - original_weight) / (len(lists) - 1)] * (len(lists) - 1)
    if fusion == "rrf":
        return DocumentJoiner(join_mode="reciprocal_rank_fusion", weights=weights, top_k=top_k).run(documents=lists)["documents"]
    fused: dict[str, float] = defaultdict(float)
    first: dict[str, Document] = {}
    for docs, weight in zip(lists, weights):
        for doc_id, share in scaled_scores(docs).items():
            fused[doc_id] += weight * share
        for doc in docs:
            first.setdefault(doc.id, doc)
    best = sorted(fused, key=lambda i: -fused[i])[:top_k]  # stable: ties keep the question's list order
    return [replace(first[i], score=fused[i]) for i in best]


def expanded_sparse_search(
    index: RagIndex, queries: list[str], top_k: int, fusion: str = "rrf", depth: Optional[int] = None, original_weight: Optional[float] = None,
    filters: Optional[dict] = None,
) -> list[Document]:
    """BM25 for each of ``queries`` (the question first, as :class:`KeywordExpander` gives them), fused
    into ``top_k`` chunks. One query: plain ``index.sparse_search`` (same scores). ``depth``: how deep
    each list goes before fusion (default ``max(3 * top_k, 30)``, as the hybrid retriever)."""
    if top_k < 1:
        return []
    distinct = list(dict.fromkeys(q for q in queries if q and q.strip()))
    if len(distinct) <= 1:
        return _bm25(index, distinct[0], top_k, filters) if distinct else []
    depth = depth or max(3 * top_k, 30)
    return fuse_lists(sparse_lists(index, distinct, depth, filters), top_k, fusion, original_weight)


@component
class KeywordExpander:
    """Question → [question, expansions…] for BM25 (see the module docstring)."""

    def __init__(
        self,
        backend: str = "prf",
        chat_generator: Any = None,
        index: RagIndex | None = None,
        index_path: str | None = None,
        n_expansions: int = 2,
        max_tokens: Optional[int] = None,
        prompt_template: Optional[str] = None,
        feedback_docs: int = 3,  # prf's two settings: set a priori, not tuned; bench/expansion.py
        n_terms: int = 5,  # chooses them on a dev slice and reports a disjoint test slice
    ):
        if backend not in EXPAND_BACKENDS:
            raise ValueError(f"backend must be one of {EXPAND_BACKENDS}, not {backend!r}")
        if backend == "llm" and chat_generator is None:
            raise ValueError("the llm expander needs a chat generator")
        if backend == "prf" and index is None and index_path is None:
            raise ValueError("the prf expander needs the index: give index= (a RagIndex) or index_path=")
        if n_expansions < 1 or feedback_docs < 1 or n_terms < 1 or (max_tokens is not None and max_tokens < 1):
            raise ValueError("n_expansions, feedback_docs, n_terms and max_tokens must be at least 1")
        self.backend, self.chat_generator = backend, chat_generator
        self._handle = IndexHandle(index, index_path) if (index is not None or index_path is not None) else None
        self.n_expansions, self.max_tokens, self.prompt_template = n_expansions, max_tokens, prompt_template
        self.feedback_docs, self.n_terms = feedback_docs, n_terms
        self._builder = None

    def warm_up(self) -> None:
        if self.backend == "llm" and hasattr(self.chat_generator, "warm_up"):
            self.chat_generator.warm_up()
        if self.backend == "prf":
            self._handle.get()

    def to_dict(self) -> dict[str, Any]:
        index_path = self._handle.index_path if self._handle is not None else None
        if self.backend == "prf" and index_path is None:
            raise ValueError("an in-memory index cannot be serialized; save it first (RagIndex.save)")
        return default_to_dict(
            self, backend=self.backend, chat_generator=generator_to_dict(self.chat_generator), index_path=index_path,
            n_expansions=self.n_expansions, max_tokens=self.max_tokens, prompt_template=self.prompt_template,
            feedback_docs=self.feedback_docs, n_terms=self.n_terms,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "KeywordExpander":
        return default_from_dict(cls, generator_from_dict(data))

    # -- backends -------------------------------------------------------------------------------
    def _messages(self, query: str) -> list[ChatMessage]:
        from haystack.components.builders import PromptBuilder

        if self.prompt_template:  # a Haystack QueryExpander template: one user message
            if self._builder is None:
                self._builder = PromptBuilder(template=self.prompt_template, required_variables=["n_expansions", "query"])
            return [ChatMessage.from_user(self._builder.run(query=query, n_expansions=self.n_expansions)["prompt"])]
        system = EXPAND_SYSTEM.replace("{{ n_expansions }}", str(self.n_expansions))
        return [ChatMessage.from_system(system), ChatMessage.from_user(f"Query: {query}")]

    def _llm(self, query: str) -> tuple[list[str], list[str], Optional[str]]:
        self.warm_up()
        # the JSON frame, and per expansion its words (a word is a token or two) plus quotes and comma
        max_tokens = self.max_tokens or 10 + self.n_expansions * (2 * MAX_EXPANSION_WORDS + 4)
        kwargs = {**expansion_constraint(self.chat_generator, self.n_expansions), "max_tokens": max_tokens, "temperature": 0.0}
        reply = call_llm(self.chat_generator, self._messages(query), lambda text: parse_expansions(text, query, self.n_expansions), kwargs, step="expand")
        if not reply.ok:
            return [], [], reply.error
        return reply.value, added_words(query, reply.value), None

    def _prf(self, query: str, filters: Optional[dict]) -> tuple[list[str], list[str], Optional[str]]:
        index = self._handle.get()
        if len(index) == 0:
            return [], [], "empty_index: no chunk to take feedback terms from"
        feedback = _bm25(index, query, self.feedback_docs, filters)  # feedback only from chunks the search may return
        if not feedback:
            return [], [], "no_feedback: BM25 found no chunk sharing a word with the question"
        terms = feedback_terms(index, query, feedback, self.n_terms)
        if not terms:
            return [], [], "no_new_terms: the feedback chunks hold no term the question lacks"
        return [f"{query.strip()} {' '.join(terms)}"], terms, None

    @component.output_types(queries=list[str], terms=list[str], failed=Optional[str])
    def run(self, query: str, filters: Optional[dict] = None) -> dict[str, Any]:
        """``filters``: the metadata filter the search will use; prf takes its feedback from those chunks only."""
        if not isinstance(query, str) or not query.strip():
            failed = "empty_query: nothing to expand"
            expansions, terms = [], []
        else:
            expansions, terms, failed = self._llm(query) if self.backend == "llm" else self._prf(query, filters)
        queries = [query] + [e for e in expansions if _normal(e) != _normal(query)]
        record(decision={"expand": self.backend, "expansions": len(queries) - 1, **({"expand_terms": terms[:10]} if terms else {}),
                         **({"expand_failed": failed.split(":")[0]} if failed else {})})
        return {"queries": queries, "terms": terms, "failed": failed}
