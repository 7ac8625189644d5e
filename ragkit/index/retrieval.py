"""Dense, sparse and hybrid retrieval over a ragkit index, as a Haystack pipeline.

Hybrid = FaissRetriever + BM25sRetriever, fused by
:class:`~ragkit.components.score_fusion.HybridScoreJoiner`: each list's scores divided by its own
best score, then a weighted sum (that module says why scores rather than reciprocal rank fusion,
and why none of Haystack's ``DocumentJoiner`` modes does it). The query embedding is its own stage (so its cost shows up in the
trace and the latency benchmark can time retrieval with and without it). Indexes built with
hierarchical chunking get Haystack's ``AutoMergingRetriever`` on top: when enough children of a
parent block are retrieved, the parent replaces them ("small to find, large to answer").

``filters`` (:mod:`ragkit.index.filters`, e.g. ``{"collection": ["wiki"], "file_type": ["pdf"]}``)
restrict both lists to the chunks they admit before ranking — FAISS through an id selector, bm25s
through a weight mask — so a filtered search still returns ``top_k`` documents whenever that many
chunks match; without filters the search is exactly the unfiltered one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from haystack import Document, Pipeline

from ragkit.components.dense_retriever import FaissRetriever
from ragkit.components.score_fusion import DEFAULT_SPARSE_WEIGHT, HybridScoreJoiner
from ragkit.components.sparse_retriever import BM25sRetriever
from ragkit.config import ModelConfig, RetrievalMode
from ragkit.index.store import RagIndex
from ragkit.llm.generators import build_text_embedder, shared_text_embedder

MAX_QUERY_CHARS = 4000
# BM25's weight in the score fusion (dense gets the rest): DEFAULT_SPARSE_WEIGHT = 0.5, equal weights,
# set a priori, not tuned. bench/fusion.py sweeps it (results/fusion.json): on SQuAD-Shifts new_wiki
# MRR@10 0.8676 / 0.8717 / 0.8685 at 0.4 / 0.5 / 0.6, so a choice made there would have been 0.5 too;
# SQuAD dev peaks at 0.5 as well (0.8684), against BM25 alone 0.8353 and dense alone 0.7271.
# Until then hybrid was reciprocal rank fusion with BM25 weighted 0.8, tuned on new_wiki
# (bench/tune_hybrid.py); on other domains it ranked the gold paragraph first less often than BM25 alone.


class QueryError(ValueError):
    """A question ragkit refuses to run: empty, or longer than :data:`MAX_QUERY_CHARS`."""


def check_query(query: str) -> str:
    if not isinstance(query, str) or not query.strip():
        raise QueryError("The question is empty.")
    bad = next((i for i, ch in enumerate(query) if 0xD800 <= ord(ch) <= 0xDFFF), None)
    if bad is not None:  # how Python hands over bytes from argv or a file that are not UTF-8
        raise QueryError(f"The question is not valid UTF-8 text (undecodable byte at character {bad + 1}); re-type it or fix its encoding.")
    if len(query) > MAX_QUERY_CHARS:
        raise QueryError(
            f"The question is {len(query):,} characters long; ragkit accepts at most {MAX_QUERY_CHARS:,}. "
            "Put long material in a document and index it instead."
        )
    return query.strip()


@dataclass
class RetrievalResult:
    documents: list[Document]
    timings: dict[str, float] = field(default_factory=dict)  # stage -> seconds
    signals: dict[str, float] = field(default_factory=dict)  # what the lists say about themselves (list_signals)


def list_signals(dense: list[Document] | None, sparse: list[Document] | None, k: int = 5) -> dict[str, float]:
    """Free confidence signals from the candidate lists: the best dense cosine and BM25 score, the
    margin of the first over the second, and whether the two retrievers agree (same first chunk;
    share of their top ``k`` in common). A question whose answer is in the index usually gets a
    clear winner that both retrievers find."""
    out: dict[str, float] = {}
    for name, docs in (("dense", dense), ("sparse", sparse)):
        scores = [d.score for d in docs or [] if d.score is not None]
        if scores:
            out[f"{name}_top"] = float(scores[0])
            out[f"{name}_margin"] = float(scores[0] - scores[1]) if len(scores) > 1 else float(scores[0])
    if dense and sparse:
        out["agree_top1"] = float(dense[0].id == sparse[0].id)
        out["overlap_top5"] = len({d.id for d in dense[:k]} & {d.id for d in sparse[:k]}) / k
    return out


def candidate_depth(top_k: int) -> int:
    """How deep each list goes before fusion: more than top_k from each side, so a document that
    one list ranks low but the other ranks high can still make the cut."""
    return max(3 * top_k, 30)


def build_hybrid_pipeline(index: RagIndex, models: ModelConfig | None = None, top_k: int = 5, sparse_weight: float = DEFAULT_SPARSE_WEIGHT) -> Pipeline:
    """The hybrid retriever as a plain Haystack Pipeline, for users composing their own.

    Inputs: ``{"embedder": {"text": q}, "sparse": {"query": q}}``; output: ``joiner.documents``,
    ranked as ``HybridRetriever.retrieve(q, top_k, mode="hybrid")`` ranks them.
    """
    depth = candidate_depth(top_k)
    pipeline = Pipeline()
    pipeline.add_component("embedder", build_text_embedder(models or ModelConfig()))
    pipeline.add_component("dense", FaissRetriever(index=index, top_k=depth))
    pipeline.add_component("sparse", BM25sRetriever(index=index, top_k=depth))
    pipeline.add_component("joiner", HybridScoreJoiner(sparse_weight=sparse_weight, top_k=top_k))
    pipeline.connect("embedder.embedding", "dense.query_embedding")
    pipeline.connect("dense.documents", "joiner.dense_documents")
    pipeline.connect("sparse.documents", "joiner.sparse_documents")
    return pipeline


class HybridRetriever:
    """Query → documents, in any of the three modes, reusing one index and one embedder."""

    def __init__(
        self,
        index: RagIndex,
        models: ModelConfig | None = None,
        embedder=None,
        merge_threshold: float = 0.5,
        sparse_weight: float = DEFAULT_SPARSE_WEIGHT,
    ):
        self.index = index
        self.models = models or ModelConfig()
        self._embedder = embedder
        self.dense = FaissRetriever(index=index)
        self.sparse = BM25sRetriever(index=index)
        self.joiner = HybridScoreJoiner(sparse_weight=sparse_weight)  # checks 0 < sparse_weight < 1
        self.sparse_weight = sparse_weight
        self._merger = None
        if index.parents:
            from haystack.components.retrievers import AutoMergingRetriever
            from haystack.document_stores.in_memory import InMemoryDocumentStore

            store = InMemoryDocumentStore()
            store.write_documents(list(index.parents.values()))
            self._merger = AutoMergingRetriever(document_store=store, threshold=merge_threshold)

    def _merge(self, leaves: list[Document]) -> list[Document]:
        """AutoMergingRetriever, then give each merged parent the best score of its children
        (the merger returns parents unscored) and restore best-first order."""
        merged = self._merger.run(documents=leaves)["documents"]
        best: dict[str, float] = {}
        for leaf in leaves:
            node = leaf
            while node is not None and node.meta.get("__parent_id"):
                pid = node.meta["__parent_id"]
                best[pid] = max(best.get(pid, float("-inf")), leaf.score or 0.0)
                node = self.index.parents.get(pid)
        rescored = [d if d.score is not None else replace(d, score=best.get(d.id, 0.0)) for d in merged]
        return sorted(rescored, key=lambda d: d.score, reverse=True)

    def _expanded(self, queries: list[str], top_k: int, filters: dict | None) -> list[Document]:
        from ragkit.components.query_expander import expanded_sparse_search

        return expanded_sparse_search(self.index, queries, top_k, filters=filters)

    @property
    def embedder(self):
        if self._embedder is None:
            self._embedder = shared_text_embedder(self.models.embedder)
        return self._embedder

    def embed(self, query: str) -> list[float]:
        return self.embedder.run(text=query)["embedding"]

    def retrieve(
        self, query: str, top_k: int = 5, mode: RetrievalMode = "hybrid", query_embedding: list[float] | None = None,
        filters: dict | None = None, sparse_queries: list[str] | None = None,
    ) -> RetrievalResult:
        """``sparse_queries``: the question and its expansions (:mod:`ragkit.components.query_expander`) — BM25
        runs each and fuses the lists; the signals still come from the question's own BM25 list, so the
        calibrated confidence reads what it was fitted on."""
        query = check_query(query)
        expanded = sparse_queries if sparse_queries and len(sparse_queries) > 1 else None
        timings: dict[str, float] = {}
        if not self.index:  # a server store answers this without counting its rows
            return RetrievalResult([], timings)
        if filters:
            # before the embedding: a malformed filter or a misspelled field is a clear error, not an empty result
            self.index.check_filter_fields(filters)
            if not self.index.filter_ids(filters):
                return RetrievalResult([], timings)
        if mode != "sparse" and query_embedding is None:
            t0 = time.perf_counter()
            query_embedding = self.embed(query)
            timings["embed"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        if mode == "dense":
            docs = self.dense.run(query_embedding=query_embedding, top_k=top_k, filters=filters)["documents"]
            signals = list_signals(docs, None)
        elif mode == "sparse":
            docs = self.sparse.run(query=query, top_k=top_k, filters=filters)["documents"]
            signals = list_signals(None, docs)
            if expanded:
                docs = self._expanded(expanded, top_k, filters)
        elif mode == "hybrid":
            # The three components are called directly rather than through Pipeline.run, which
            # deep-copies every input element by element (~15 ms a query for a 384-d embedding
            # and 60 candidate Documents); build_hybrid_pipeline() gives the same wiring as a Pipeline.
            depth = candidate_depth(top_k)
            dense = self.dense.run(query_embedding=query_embedding, top_k=depth, filters=filters)["documents"]
            sparse = self.sparse.run(query=query, top_k=depth, filters=filters)["documents"]
            signals = list_signals(dense, sparse)
            if expanded:
                sparse = self._expanded(expanded, depth, filters)
            docs = self.joiner.run(dense_documents=dense, sparse_documents=sparse, top_k=top_k)["documents"]
        else:
            raise ValueError(f"retrieval mode must be dense, sparse or hybrid, not {mode!r}")
        timings["retrieve"] = time.perf_counter() - t0
        if self._merger is not None and docs:
            t0 = time.perf_counter()
            docs = self._merge(docs)
            timings["merge"] = time.perf_counter() - t0
        return RetrievalResult(docs, timings, signals)
