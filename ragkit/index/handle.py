"""Shared plumbing for components that read a :class:`~ragkit.index.store.RagIndex`.

A retriever is built either around an index object already in memory or around an index path
or store URL (which is what ``to_dict`` records; :mod:`ragkit.index.stores`). Indexes opened by path are shared per process, so a dense
and a sparse retriever over the same folder hold one copy of the chunk table.
"""

from __future__ import annotations

import threading
from pathlib import Path

from ragkit.index.store import RagIndex
from ragkit.index.stores import index_location, is_store_url, open_store

_OPEN: dict[tuple[str, str, int], RagIndex] = {}
_LOCK = threading.Lock()


def open_index(path: str | Path) -> RagIndex:
    if is_store_url(path):  # a server store: one client (one connection pool) per URL and process
        with _LOCK:
            key = (str(path), "", 0)
            if key not in _OPEN:
                _OPEN[key] = open_store(str(path))
            return _OPEN[key]
    path = Path(path).resolve()
    # keyed by the live version folder (a save makes a new one) and its manifest's mtime (a flat
    # index from before versioned folders is rewritten in place)
    live = RagIndex.live_dir(path)
    try:
        key = (str(path), str(live), (live / "manifest.json").stat().st_mtime_ns)
    except (OSError, TypeError):
        key = (str(path), "", 0)
    with _LOCK:
        if key not in _OPEN:
            _OPEN[key] = RagIndex.load(path)
        return _OPEN[key]


class IndexHandle:
    """Holds either an index or the path to lazily open it from."""

    def __init__(self, index: RagIndex | None, index_path: str | None):
        if index is None and index_path is None:
            raise ValueError("give either index= (a RagIndex) or index_path= (a saved index folder)")
        self._index = index
        self.index_path = index_path if index_path is not None else index_location(index)

    def get(self) -> RagIndex:
        if self._index is None:
            self._index = open_index(self.index_path)
        return self._index
