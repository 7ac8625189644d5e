"""Dense, sparse and hybrid retrieval over a ragkit index, as a Haystack pipeline.

Hybrid = FaissRetriever + BM25sRetriever, fused by Haystack's ``DocumentJoiner`` in
``reciprocal_rank_fusion`` mode. The query embedding is its own stage (so its cost shows up in the
trace and the latency benchmark can time retrieval with and without it). Indexes built with
hierarchical chunking get Haystack's ``AutoMergingRetriever`` on top: when enough children of a
parent block are retrieved, the parent replaces them ("small to find, large to answer").
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from haystack import Document, Pipeline
from haystack.components.joiners import DocumentJoiner

from ragkit.components.dense_retriever import FaissRetriever
from ragkit.components.sparse_retriever import BM25sRetriever
from ragkit.config import ModelConfig, RetrievalMode
from ragkit.index.store import RagIndex
from ragkit.llm.generators import build_text_embedder, shared_text_embedder

MAX_QUERY_CHARS = 4000
# Weight of the BM25 list in reciprocal rank fusion (dense gets the rest; 0.5 is plain RRF).
# Chosen by bench/tune_hybrid.py on SQuAD-Shifts new_wiki, held out from the SQuAD dev benchmark:
# nDCG@10 0.8637 at 0.5, 0.8798 at 0.8 (best), against 0.8688 for BM25 alone and 0.7806 for dense.
DEFAULT_SPARSE_WEIGHT = 0.8


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
    """How deep each list goes before fusion: RRF needs more than top_k from each side."""
    return max(3 * top_k, 30)


def build_hybrid_pipeline(index: RagIndex, models: ModelConfig | None = None, top_k: int = 5, sparse_weight: float = DEFAULT_SPARSE_WEIGHT) -> Pipeline:
    """The hybrid retriever as a plain Haystack Pipeline, for users composing their own.

    Inputs: ``{"embedder": {"text": q}, "sparse": {"query": q}}``; output: ``joiner.documents``.
    """
    depth = candidate_depth(top_k)
    pipeline = Pipeline()
    pipeline.add_component("embedder", build_text_embedder(models or ModelConfig()))
    pipeline.add_component("dense", FaissRetriever(index=index, top_k=depth))
    pipeline.add_component("sparse", BM25sRetriever(index=index, top_k=depth))
    pipeline.add_component("joiner", DocumentJoiner(join_mode="reciprocal_rank_fusion", weights=[1.0 - sparse_weight, sparse_weight], top_k=top_k))
    pipeline.connect("embedder.embedding", "dense.query_embedding")
    pipeline.connect("dense.documents", "joiner.documents")
    pipeline.connect("sparse.documents", "joiner.documents")
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
        if not 0.0 < sparse_weight < 1.0:
            raise ValueError("sparse_weight must be between 0 and 1 (exclusive)")
        self.sparse_weight = sparse_weight
        # lists are passed as [dense, sparse]
        self.joiner = DocumentJoiner(join_mode="reciprocal_rank_fusion", weights=[1.0 - sparse_weight, sparse_weight])
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

    @property
    def embedder(self):
        if self._embedder is None:
            self._embedder = shared_text_embedder(self.models.embedder)
        return self._embedder

    def embed(self, query: str) -> list[float]:
        return self.embedder.run(text=query)["embedding"]

    def retrieve(
        self, query: str, top_k: int = 5, mode: RetrievalMode = "hybrid", query_embedding: list[float] | None = None
    ) -> RetrievalResult:
        query = check_query(query)
        timings: dict[str, float] = {}
        if len(self.index) == 0:
            return RetrievalResult([], timings)
        if mode != "sparse" and query_embedding is None:
            t0 = time.perf_counter()
            query_embedding = self.embed(query)
            timings["embed"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        if mode == "dense":
            docs = self.dense.run(query_embedding=query_embedding, top_k=top_k)["documents"]
            signals = list_signals(docs, None)
        elif mode == "sparse":
            docs = self.sparse.run(query=query, top_k=top_k)["documents"]
            signals = list_signals(None, docs)
        elif mode == "hybrid":
            # The three components are called directly rather than through Pipeline.run, which
            # deep-copies every input element by element (~15 ms a query for a 384-d embedding
            # and 60 candidate Documents); build_hybrid_pipeline() gives the same wiring as a Pipeline.
            depth = candidate_depth(top_k)
            dense = self.dense.run(query_embedding=query_embedding, top_k=depth)["documents"]
            sparse = self.sparse.run(query=query, top_k=depth)["documents"]
            docs = self.joiner.run(documents=[dense, sparse], top_k=top_k)["documents"]
            signals = list_signals(dense, sparse)
        else:
            raise ValueError(f"retrieval mode must be dense, sparse or hybrid, not {mode!r}")
        timings["retrieve"] = time.perf_counter() - t0
        if self._merger is not None and docs:
            t0 = time.perf_counter()
            docs = self._merge(docs)
            timings["merge"] = time.perf_counter() - t0
        return RetrievalResult(docs, timings, signals)
