"""A server store's chunk table seen as the local index's ``chunks`` mapping (``{id: Document}``).

Lookups go by id to the store, iteration over every id, values in pages. Iterating the values reads the
whole store: fine for what a notebook prepares once (the reranker's sentence vectors), not something a
search does.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from haystack import Document


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
