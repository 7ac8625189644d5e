"""BM25sRetriever: sparse retrieval over a ragkit index with bm25s (stemmed, stopwords removed).

Usage::

    from ragkit.components import BM25sRetriever
    retriever = BM25sRetriever(index_path=".ragkit/index", top_k=5)
    retriever.run(query="Where was Tesla born?")["documents"]   # Documents with BM25 .score
    retriever.run(query="Where was Tesla born?", filters={"file_type": ["pdf"]})   # only PDF chunks

``filters`` is ragkit's metadata filter (:mod:`ragkit.index.filters`): bm25s scores only the chunks
it admits (a weight mask), so the best ``top_k`` of them come back.
"""

from __future__ import annotations

from typing import Any, Optional

from haystack import Document, component, default_from_dict, default_to_dict

from ragkit.index.handle import IndexHandle
from ragkit.index.store import RagIndex


@component
class BM25sRetriever:
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
    def from_dict(cls, data: dict[str, Any]) -> "BM25sRetriever":
        return default_from_dict(cls, data)

    @component.output_types(documents=list[Document])
    def run(self, query: str, top_k: int | None = None, filters: Optional[dict] = None) -> dict[str, list[Document]]:
        return {"documents": self._handle.get().sparse_search(query, top_k or self.top_k, filters=filters)}
