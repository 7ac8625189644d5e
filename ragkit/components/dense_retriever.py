"""FaissRetriever: dense retrieval over a ragkit index (FAISS inner product on normalised vectors).

Usage::

    from ragkit.components import FaissRetriever
    retriever = FaissRetriever(index_path=".ragkit/index", top_k=5)
    retriever.run(query_embedding=vector)["documents"]   # Documents with cosine .score
    retriever.run(query_embedding=vector, filters={"collection": ["wiki"]})   # only that collection's chunks

``filters`` is ragkit's metadata filter (:mod:`ragkit.index.filters`): FAISS searches only the
chunks it admits, so up to ``top_k`` of them come back whenever that many match.
"""

from __future__ import annotations

from typing import Any, Optional

from haystack import Document, component, default_from_dict, default_to_dict

from ragkit.index.handle import IndexHandle
from ragkit.index.store import RagIndex


@component
class FaissRetriever:
    def __init__(self, index: RagIndex | None = None, index_path: str | None = None, top_k: int = 10):
        if top_k < 1:
            raise ValueError("top_k must be at least 1")
        self._handle = IndexHandle(index, index_path)
        self.top_k = top_k

    def warm_up(self) -> None:
        self._handle.get()

    def to_dict(self) -> dict[str, Any]:
        if self._handle.index_path is None:
            raise ValueError("an in-memory index cannot be serialized; save it first (RagIndex.save)")
        return default_to_dict(self, index_path=self._handle.index_path, top_k=self.top_k)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "FaissRetriever":
        return default_from_dict(cls, data)

    @component.output_types(documents=list[Document])
    def run(self, query_embedding: list[float], top_k: int | None = None, filters: Optional[dict] = None) -> dict[str, list[Document]]:
        return {"documents": self._handle.get().dense_search(query_embedding, top_k or self.top_k, filters=filters)}
