"""What both server stores (PostgreSQL, Milvus) share above their own client code: the chunk table seen
as the local index's ``chunks`` mapping (``{id: Document}``), ragkit's filters in Haystack's form, the
check of a query vector, and the counts derived from the sources.

:class:`StoreChunks`: lookups go by id to the store, iteration over every id, values in pages.
Iterating the values reads the whole store: fine for what a notebook prepares once (the reranker's
sentence vectors), not something a search does.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np
from haystack import Document

from ragkit.index.filters import FilterError, is_haystack_filter, normalize_filters, to_haystack
from ragkit.index.versions import EmbedderMismatchError


class StoreChunks(Mapping):
    """``index.chunks`` of a server store (needs ``get(ids)``, ``chunk_ids()`` and ``len`` from the index)."""

    PAGE = 1000

    def __init__(self, index):
        self._index = index

    def __getitem__(self, chunk_id: str) -> Document:
        found = self._index.get([chunk_id])
        if not found:
            raise KeyError(chunk_id)
        return found[0]

    def __contains__(self, chunk_id) -> bool:
        return isinstance(chunk_id, str) and bool(self._index.get([chunk_id]))

    def __iter__(self) -> Iterator[str]:
        return iter(self._index.chunk_ids())

    def __len__(self) -> int:
        return len(self._index)

    def values(self):  # type: ignore[override]
        ids = list(self)
        for start in range(0, len(ids), self.PAGE):
            yield from self._index.get(ids[start:start + self.PAGE])

    def items(self):  # type: ignore[override]
        return ((d.id, d) for d in self.values())


class ServerStoreMixin:
    """Shared by :class:`~ragkit.index.pgvector_index.PgvectorIndex` and :class:`~ragkit.index.milvus_index.MilvusIndex`
    (needs ``dim``, ``embedder``, ``get``, ``chunk_ids``, ``meta_fields``, ``sources`` and ``len``)."""

    @property
    def chunks(self) -> StoreChunks:
        return StoreChunks(self)

    def _haystack_filters(self, filters: dict | None) -> dict | None:
        normalized = normalize_filters(filters)
        if not normalized:
            return None
        return normalized if is_haystack_filter(normalized) else to_haystack(normalized)

    def _unit_query(self, query_embedding) -> list[float]:
        """The query vector, checked against the store's dimension and normalised (the stores hold unit vectors)."""
        query = np.asarray(query_embedding, dtype="float32").reshape(-1)
        if query.shape[0] != self.dim:
            raise EmbedderMismatchError(f"query embedding has {query.shape[0]} dimensions; the store holds {self.dim}-d vectors from {self.embedder}")
        return (query / (float(np.linalg.norm(query)) or 1.0)).tolist()

    def check_filter_fields(self, filters: dict | None) -> None:
        normalized = normalize_filters(filters)
        if not normalized or is_haystack_filter(normalized):
            return
        known = self.meta_fields()
        for key in normalized:
            if key not in known:
                raise FilterError(f"no chunk of this store has a metadata field {key!r}; fields it has: {', '.join(sorted(known))}")

    def collection_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for info in self.sources.values():
            counts[info.collection] = counts.get(info.collection, 0) + info.chunks
        return counts
