"""Metadata postings and filter matching for :class:`~ragkit.index.store.RagIndex`.

A search's metadata filter (:mod:`ragkit.index.filters`) admits the chunks found through per-field
postings (value → chunk ids, built per field on demand); each filter's chunks are kept, until the
index changes, in the forms FAISS (an ``IDSelectorBatch``) and bm25s (a ``weight_mask``) search.

Apart from :mod:`ragkit.index.store` (the chunk table and its searches) because this only reads chunk
metadata; ``RagIndex`` inherits :class:`MetadataFiltersMixin`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from ragkit.index.filters import FilterError, filter_key, is_haystack_filter, normalize_filters

_FILTER_CACHE_SIZE = 128  # distinct filters whose matching chunks are kept until the index changes


@dataclass
class _Matching:
    """The chunks one filter admits, in the forms each search needs (built once per filter)."""

    ids: frozenset[str]
    fids: np.ndarray  # FAISS ids, int64
    selector: object = None  # faiss.IDSelectorBatch over fids, built on the first dense search
    sparse_mask: np.ndarray | None = None  # 1.0 on the bm25s rows of ids, built on the first sparse search


class MetadataFiltersMixin:
    """The metadata side of :class:`~ragkit.index.store.RagIndex`, which inherits it: it reads the
    chunk table and keeps ``_postings`` and ``_matching``, which the index clears when chunks change."""

    # -- metadata and filters ----------------------------------------------------------------
    def collection_counts(self) -> dict[str, int]:
        """Chunks per collection, for the collections that hold any."""
        return self.meta_values("collection")

    def meta_values(self, field_name: str) -> dict:
        """Each value the chunks hold in ``meta[field_name]`` -> how many chunks hold it."""
        return {value: len(ids) for value, ids in self._posting(field_name).items()}

    def _posting(self, field_name: str) -> dict:
        posting = self._postings.get(field_name)
        if posting is None:
            posting = {}
            for cid, doc in self.chunks.items():
                value = doc.meta.get(field_name)
                if value is not None and isinstance(value, (str, int, float, bool)):
                    posting.setdefault(value, []).append(cid)
            self._postings[field_name] = posting
        return posting

    def filter_ids(self, filters: dict | None) -> frozenset[str] | None:
        """The ids of the chunks ``filters`` admits (None: no filter, every chunk). A field no chunk
        carries admits nothing; a malformed filter raises :class:`~ragkit.index.filters.FilterError`."""
        found = self._match(filters)
        return found.ids if found is not None else None

    def check_filter_fields(self, filters: dict | None) -> None:
        """FilterError if a simple-form filter names a field no chunk of the index carries (a typo
        would otherwise silently match nothing)."""
        normalized = normalize_filters(filters)
        if not normalized or is_haystack_filter(normalized) or not self.chunks:
            return
        for key in normalized:
            if not self._posting(key):
                fields = sorted({k for doc in itertools.islice(self.chunks.values(), 2000) for k in doc.meta if not k.startswith("_")})
                raise FilterError(f"no chunk of this index has a metadata field {key!r}; fields it has: {', '.join(fields)}")

    def _match(self, filters: dict | None) -> _Matching | None:
        normalized = normalize_filters(filters)
        if not normalized:
            return None
        key = filter_key(normalized)
        found = self._matching.get(key)
        if found is not None:
            return found
        if is_haystack_filter(normalized):
            from haystack.utils.filters import document_matches_filter

            ids = frozenset(cid for cid, doc in self.chunks.items() if document_matches_filter(normalized, doc))
        else:
            ids = None
            for field_name, values in normalized.items():
                posting = self._posting(field_name)
                admitted = set().union(*(posting.get(v, ()) for v in values))
                ids = admitted if ids is None else ids & admitted
            ids = frozenset(ids or ())
        fids = np.fromiter((self._faiss_id[cid] for cid in ids), dtype="int64", count=len(ids))
        if len(self._matching) >= _FILTER_CACHE_SIZE:
            self._matching.clear()
        found = self._matching[key] = _Matching(ids=ids, fids=fids)
        return found
