"""IndexRetriever: dense, sparse or hybrid retrieval over a ragkit index, as one pipeline step.

The engine's graph needs retrieval as a single node that takes the question, an optional query
embedding (the question's, or HyDE's) and ``top_k`` (which the router's branch may set), and that
also reports what the candidate lists say about themselves (``signals``: best scores, margins,
dense/sparse agreement) for the confidence step. :class:`~ragkit.index.retrieval.HybridRetriever`
does the work (FAISS + bm25s fused by :class:`~ragkit.components.score_fusion.HybridScoreJoiner`,
auto-merging for hierarchical indexes); this component adds the pipeline sockets and serialization by index path.

``top_k`` (10 unless given at init, like Haystack's retrievers) may be set per call, e.g. by a router's
branch; ``sparse_weight`` is BM25's weight in that fusion (0.5 by default).
``candidates`` > ``top_k`` retrieves deeper for a reranker downstream (which then keeps ``top_k``).
``filters`` (optional input; :mod:`ragkit.index.filters`, e.g. from
:class:`~ragkit.components.collection_selector.CollectionSelector` or
:class:`~ragkit.components.intent_filter.IntentFilter`) restricts retrieval to the chunks whose
metadata match: ``{"collection": ["wiki"], "file_type": ["pdf"]}``, AND across keys, OR within a list.
``scope`` (optional input) is a filter the person chose — the answer to a clarification
(:class:`~ragkit.components.ambiguity_check.AmbiguityCheck`) — AND-ed with ``filters``.

Usage::

    retriever = IndexRetriever(index_path=".ragkit/index", mode="hybrid", top_k=5)
    out = retriever.run(query="Where was Tesla born?", query_embedding=vector)
    out["documents"], out["signals"]
    retriever.run(query="Where was Tesla born?", top_k=3, filters={"collection": ["wiki"]})
"""

from __future__ import annotations

from typing import Any, Optional

from haystack import Document, component, default_from_dict, default_to_dict

from ragkit.config import ModelConfig
from ragkit.index.filters import scoped
from ragkit.index.handle import IndexHandle
from ragkit.index.retrieval import DEFAULT_SPARSE_WEIGHT, HybridRetriever
from ragkit.index.store import RagIndex
from ragkit.index.versions import StoreUnavailableError
from ragkit.pipeline.trace import record

MODES = ("dense", "sparse", "hybrid")


@component
class IndexRetriever:
    def __init__(
        self,
        index: RagIndex | None = None,
        index_path: str | None = None,
        mode: str = "hybrid",
        top_k: int = 10,
        candidates: int = 0,
        sparse_weight: float = DEFAULT_SPARSE_WEIGHT,
        merge_threshold: float = 0.5,
        embedder: str = "all-MiniLM-L6-v2",
    ):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        if candidates < 0 or top_k < 1:
            raise ValueError("candidates must be >= 0 and top_k >= 1")
        self._handle = IndexHandle(index, index_path)
        self.mode, self.top_k, self.candidates = mode, top_k, candidates
        self.sparse_weight, self.merge_threshold, self.embedder = sparse_weight, merge_threshold, embedder
        self._retriever: HybridRetriever | None = None

    def warm_up(self) -> None:
        if self._retriever is None:
            self._retriever = HybridRetriever(
                self._handle.get(), ModelConfig(embedder=self.embedder), merge_threshold=self.merge_threshold, sparse_weight=self.sparse_weight,
            )

    def to_dict(self) -> dict[str, Any]:
        if self._handle.index_path is None:
            raise ValueError("an in-memory index cannot be serialized; save it first (RagIndex.save)")
        return default_to_dict(
            self, index_path=self._handle.index_path, mode=self.mode, top_k=self.top_k, candidates=self.candidates,
            sparse_weight=self.sparse_weight, merge_threshold=self.merge_threshold, embedder=self.embedder,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "IndexRetriever":
        return default_from_dict(cls, data)

    @component.output_types(documents=list[Document], signals=dict)
    def run(
        self, query: str, top_k: Optional[int] = None, query_embedding: Optional[list[float]] = None, filters: Optional[dict] = None,
        sparse_queries: Optional[list[str]] = None, scope: Optional[dict] = None,
    ) -> dict[str, Any]:
        """``scope``: a filter the person asking chose (a clarification's answer), AND-ed with ``filters``;
        when the two contradict, the person's choice wins and the trace says so."""
        self.warm_up()
        top_k = top_k or self.top_k
        filters, clash = scoped(filters, scope)  # a clarification's answer narrows the search
        if clash:
            record(warning=clash)
        # Without an embedding (none computed, or HyDE's step failed) a dense or hybrid retriever
        # embeds the question itself; sparse needs none.
        try:
            found = self._retriever.retrieve(
                query, top_k=max(self.candidates, top_k), mode=self.mode, query_embedding=query_embedding, filters=filters or None,
                sparse_queries=sparse_queries if self.mode != "dense" else None,
            )
        except StoreUnavailableError as exc:  # a server store went away mid-question: no evidence, said in the trace
            record(fallback=f"retrieval failed: {exc}")
            return {"documents": [], "signals": {}}
        documents = found.documents if self.candidates else found.documents[:top_k]
        return {"documents": documents, "signals": found.signals}
