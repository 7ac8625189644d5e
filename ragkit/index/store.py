"""The on-disk index: one chunk table shared by a FAISS dense index and a bm25s sparse index.

Why faiss-cpu directly instead of faiss-haystack's ``FAISSDocumentStore``: that store keeps every
chunk's embedding twice — in FAISS and as a Python ``list[float]`` on the Document — persists the
embeddings as JSON text, and has no sparse side. Measured at 20k chunks (bench/faiss_store_memory.py):
394 MB resident and 207 MB on disk against 168 MB and 46 MB here (bm25s index included), and 22 s
against 3 s to build and save. Here vectors live only in FAISS and both retrievers share one table.

Collections: every chunk carries ``meta["collection"]`` (a slug, ``"default"`` unless the indexer
was given one) and :attr:`RagIndex.collections` maps each collection to its description. An index
written before collections existed loads with all of its chunks in ``"default"``. Searches take
an optional metadata filter (:mod:`ragkit.index.filters`); the chunks it admits are found through
per-field postings, and FAISS (an ``IDSelectorBatch``) and bm25s (a ``weight_mask``) search only
those, so a filtered search returns the true top-k of the matching chunks, not a post-filtered
remainder of the unfiltered top-k.

Saving and loading (the version layout, checksums and the write lock) are in
:mod:`ragkit.index.store_files`, and the metadata postings behind filtered searches in
:mod:`ragkit.index.store_filters`; ``RagIndex`` inherits both, so its API is all here.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Iterable

import faiss
import numpy as np
from haystack import Document

from ragkit.index.filters import DEFAULT_COLLECTION, check_collection_name
from ragkit.index.versions import (  # noqa: F401  (the index's error types and lock are part of this module's API)
    DEFAULT_LOCK_TIMEOUT_S,
    EmbedderMismatchError,
    IndexCorruptedError,
    IndexError_,
    IndexLockedError,
    IndexNotFoundError,
    IndexVersionError,
    index_write_lock,
)
from ragkit.index.records import unstorable
from ragkit.index.sparse import BM25sIndex
from ragkit.index.store_files import IndexFilesMixin, SourceInfo
from ragkit.index.store_filters import MetadataFiltersMixin, _Matching

DEFAULT_INDEX_DIR = ".ragkit/index"  # where the CLI, the notebooks and AgenticRAG look unless told otherwise
# Exact search scans every vector: ~0.15 ms per 1k chunks of 384-d on one core, memory-bound.
# Past this size an "auto" index switches to HNSW. bench/hnsw_recall.py at 101k chunks: exact
# 14.8 ms; HNSW recall@10 vs exact 0.82 / 0.92 / 0.95 at efSearch 96 / 256 / 512, in 0.2 / 0.35 / 0.6 ms.
HNSW_THRESHOLD = 50_000
HNSW_M = 32
HNSW_EF_CONSTRUCTION = 80
HNSW_EF_SEARCH = 512


class RagIndex(IndexFilesMixin, MetadataFiltersMixin):
    """Chunks with embeddings in, dense and sparse top-k out; persists to a directory.

    Usage::

        index = RagIndex(embedder="all-MiniLM-L6-v2", dim=384)
        index.add(embedded_chunks)                  # Documents with .embedding and meta["source"]
        index.dense_search(query_vector, top_k=5)   # Documents with .score (cosine)
        index.sparse_search("tesla birthplace", 5)  # Documents with .score (BM25)
        index.sparse_search("tesla", 5, filters={"collection": ["wiki"]})  # only chunks of that collection
        index.save(".ragkit/index"); RagIndex.load(".ragkit/index")
    """

    def __init__(self, embedder: str, dim: int, sparse_language: str = "english", dense_index: str = "auto"):
        if dense_index not in ("auto", "flat", "hnsw"):
            raise ValueError(f"dense_index must be auto, flat or hnsw, not {dense_index!r}")
        self.embedder = embedder
        self.dim = int(dim)
        self.dense_index = dense_index
        self.chunks: dict[str, Document] = {}
        self.parents: dict[str, Document] = {}
        self.sources: dict[str, SourceInfo] = {}
        # collection name -> description ("" when none was given); saved in the manifest
        self.collections: dict[str, str] = {}
        self._postings: dict[str, dict] = {}  # meta field -> value -> chunk ids, built per field on demand
        self._matching: dict[str, _Matching] = {}  # filter_key -> the chunks it admits
        self._faiss_id: dict[str, int] = {}
        self._chunk_at: dict[int, str] = {}
        self._next_faiss_id = 0
        self._dense = self._new_dense(hnsw=dense_index == "hnsw")
        self._sparse = BM25sIndex(language=sparse_language)
        self._sparse_stale = False
        self.path: Path | None = None  # the index folder it was last saved to or loaded from
        # absolute folder that source identities are relative to (set by the indexer; see indexer.py)
        self.root: str | None = None

    def __len__(self) -> int:
        return len(self.chunks)

    # -- dense index kind ----------------------------------------------------------------------
    def _new_dense(self, hnsw: bool):
        if not hnsw:
            return faiss.IndexIDMap2(faiss.IndexFlatIP(self.dim))
        graph = faiss.IndexHNSWFlat(self.dim, HNSW_M, faiss.METRIC_INNER_PRODUCT)
        graph.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
        return faiss.IndexIDMap2(graph)

    @property
    def is_hnsw(self) -> bool:
        return isinstance(faiss.downcast_index(self._dense.index), faiss.IndexHNSW)

    def _rebuild_dense(self, hnsw: bool, drop: set[int] = frozenset()) -> None:
        """Re-create the FAISS index from its own stored vectors (HNSW cannot remove, and an
        "auto" index changes kind as it grows)."""
        ids = faiss.vector_to_array(self._dense.id_map).astype("int64")
        vectors = self._dense.index.reconstruct_n(0, self._dense.ntotal) if self._dense.ntotal else np.zeros((0, self.dim), "float32")
        if drop:
            keep = np.array([i not in drop for i in ids.tolist()], dtype=bool)
            ids, vectors = ids[keep], vectors[keep]
        fresh = self._new_dense(hnsw)
        if len(ids):
            fresh.add_with_ids(np.ascontiguousarray(vectors, dtype="float32"), ids)
        self._dense = fresh

    def _wants_hnsw(self) -> bool:
        return self.dense_index == "hnsw" or (self.dense_index == "auto" and len(self.chunks) > HNSW_THRESHOLD)

    # -- writing -----------------------------------------------------------------------------
    def add(self, chunks: Iterable[Document], parents: Iterable[Document] = (), source_hashes: dict[str, str] | None = None) -> int:
        """Add embedded chunks (their ids must be new). Returns how many were added.

        Every chunk is checked before anything changes, so a bad batch leaves the index as it was.
        """
        chunks = [_with_collection(doc) for doc in chunks]
        parents = [_with_collection(doc) for doc in parents]
        vectors = []
        batch_collection: dict[str, str] = {}
        for doc in chunks:
            if doc.embedding is None:
                raise ValueError(f"chunk {doc.id} has no embedding; run it through an embedder first")
            if len(doc.embedding) != self.dim:
                raise EmbedderMismatchError(
                    f"chunk {doc.id} has a {len(doc.embedding)}-d embedding; this index holds {self.dim}-d vectors "
                    f"from {self.embedder}"
                )
            if doc.id in self.chunks:
                raise ValueError(f"chunk {doc.id} is already in the index (delete its source first)")
            if problem := unstorable(doc):
                raise ValueError(f"chunk {doc.id} of {doc.meta.get('source')!a} cannot be saved as UTF-8 JSON: {problem}")
            src, name = doc.meta.get("source", ""), doc.meta["collection"]
            known = batch_collection.setdefault(src, self.sources[src].collection if src in self.sources else name)
            if known != name:
                raise ValueError(
                    f"chunk {doc.id} of {src!a} is in collection {name!r}, but that source's chunks are in {known!r}; "
                    "a source belongs to one collection (move it with RagIndex.move_sources)"
                )
            vectors.append(doc.embedding)
        if not chunks:
            return 0
        matrix = np.asarray(vectors, dtype="float32")
        faiss.normalize_L2(matrix)
        ids = np.arange(self._next_faiss_id, self._next_faiss_id + len(chunks), dtype="int64")
        self._dense.add_with_ids(matrix, ids)
        for doc, fid in zip(chunks, ids.tolist()):
            self.chunks[doc.id] = replace(doc, embedding=None, score=None)
            self._faiss_id[doc.id] = fid
            self._chunk_at[fid] = doc.id
        self._next_faiss_id += len(chunks)
        if self._wants_hnsw() and not self.is_hnsw:
            self._rebuild_dense(hnsw=True)
        for parent in parents:
            self.parents[parent.id] = replace(parent, embedding=None, score=None)
        counts: dict[str, int] = {}
        for doc in chunks:
            src = doc.meta.get("source", "")
            counts[src] = counts.get(src, 0) + 1
        for src, n in counts.items():
            digest = (source_hashes or {}).get(src, "")
            prev = self.sources.get(src)
            self.sources[src] = SourceInfo(
                sha256=digest or (prev.sha256 if prev else ""), chunks=(prev.chunks if prev else 0) + n, collection=batch_collection[src],
            )
        for name in batch_collection.values():
            self.collections.setdefault(name, "")
        self._changed()
        return len(chunks)

    def delete_source(self, source: str) -> int:
        """Remove every chunk (and parent) of one source file. Returns how many chunks went."""
        doomed = [cid for cid, doc in self.chunks.items() if doc.meta.get("source") == source]
        if doomed:
            fids = np.asarray([self._faiss_id.pop(cid) for cid in doomed], dtype="int64")
            if self.is_hnsw:
                self._rebuild_dense(hnsw=True, drop=set(fids.tolist()))
            else:
                self._dense.remove_ids(fids)
            for cid, fid in zip(doomed, fids.tolist()):
                del self.chunks[cid]
                del self._chunk_at[fid]
            self._changed()
        for pid in [pid for pid, doc in self.parents.items() if doc.meta.get("source") == source]:
            del self.parents[pid]
        self.sources.pop(source, None)
        return len(doomed)

    def move_sources(self, moves: dict[str, str]) -> int:
        """Put each source of ``moves`` (source -> collection) in that collection, without
        re-embedding: its chunks and parents get the new ``meta["collection"]`` (their ids stay).
        Returns how many chunks changed collection."""
        for name in moves.values():
            check_collection_name(name)
        moved = 0
        for table in (self.chunks, self.parents):
            for cid, doc in table.items():
                target = moves.get(doc.meta.get("source"))
                if target is not None and doc.meta.get("collection") != target:
                    table[cid] = replace(doc, meta={**doc.meta, "collection": target})
                    moved += table is self.chunks
        for source, name in moves.items():
            if source in self.sources:
                self.sources[source].collection = name
                self.collections.setdefault(name, "")
        self._changed(texts=False)
        return moved

    def _changed(self, texts: bool = True) -> None:
        """Drop what was derived from the chunk table (bm25s only if chunk texts changed)."""
        self._sparse_stale = self._sparse_stale or texts
        self._postings.clear()
        self._matching.clear()

    def set_description(self, name: str, description: str) -> None:
        self.collections[name] = description

    def set_root(self, root: str) -> None:
        self.root = root

    def prune_collections(self) -> list[str]:
        """Drop the descriptions of collections that no longer hold a chunk; returns their names."""
        held = self.collection_counts()
        gone = [name for name in self.collections if name not in held]
        for name in gone:
            del self.collections[name]
        return gone

    # -- reading -----------------------------------------------------------------------------
    def dense_search(self, query_embedding, top_k: int, filters: dict | None = None) -> list[Document]:
        """The ``top_k`` chunks nearest the query (cosine), among those ``filters`` admits."""
        if top_k <= 0 or self._dense.ntotal == 0:
            return []
        query = np.asarray(query_embedding, dtype="float32").reshape(1, -1)
        if query.shape[1] != self.dim:
            raise EmbedderMismatchError(
                f"query embedding has {query.shape[1]} dimensions; the index holds {self.dim}-d vectors from {self.embedder}"
            )
        faiss.normalize_L2(query)
        if filters:
            return self._filtered_dense_search(query, top_k, filters)
        k = min(top_k, self._dense.ntotal)
        if self.is_hnsw:
            faiss.downcast_index(self._dense.index).hnsw.efSearch = max(HNSW_EF_SEARCH, 2 * k)
        scores, fids = self._dense.search(query, k)
        return [
            replace(self.chunks[self._chunk_at[fid]], score=float(score))
            for score, fid in zip(scores[0].tolist(), fids[0].tolist())
            if fid != -1
        ]

    def _filtered_dense_search(self, query: np.ndarray, top_k: int, filters: dict) -> list[Document]:
        self.check_filter_fields(filters)
        found = self._match(filters)
        k = min(top_k, len(found.fids))
        if k == 0:
            return []
        if found.selector is None:
            found.selector = faiss.IDSelectorBatch(found.fids)
        if self.is_hnsw:
            params = faiss.SearchParametersHNSW(sel=found.selector, efSearch=max(HNSW_EF_SEARCH, 2 * k))
        else:
            params = faiss.SearchParameters(sel=found.selector)  # flat: an exact scan of the admitted vectors
        scores, fids = self._dense.search(query, k, params=params)
        hits = [(float(s), f) for s, f in zip(scores[0].tolist(), fids[0].tolist()) if f != -1]
        if len(hits) < k:
            # a filtered HNSW walk can strand itself among rejected nodes; the admitted vectors
            # are then scored exactly, so the caller still gets top_k when that many match
            vectors = self._dense.reconstruct_batch(found.fids)
            sims = vectors @ query[0]
            best = np.argsort(-sims, kind="stable")[:k]
            hits = [(float(sims[i]), int(found.fids[i])) for i in best]
        return [replace(self.chunks[self._chunk_at[fid]], score=score) for score, fid in hits]

    def sparse_search(self, query: str, top_k: int, filters: dict | None = None) -> list[Document]:
        """The ``top_k`` chunks with the best positive BM25 score, among those ``filters`` admits."""
        self._refresh_sparse()
        if filters:
            self.check_filter_fields(filters)
            found = self._match(filters)
            if not found.ids:
                return []
            if found.sparse_mask is None:
                found.sparse_mask = self._sparse.mask(found.ids)
            return [replace(self.chunks[cid], score=score) for cid, score in self._sparse.search(query, top_k, mask=found.sparse_mask)]
        return [replace(self.chunks[cid], score=score) for cid, score in self._sparse.search(query, top_k)]

    def term_weights(self, text: str) -> dict[str, float]:
        """IDF of ``text``'s terms in this index (:meth:`BM25sIndex.term_weights`)."""
        self._refresh_sparse()
        return self._sparse.term_weights(text)

    def terms(self, texts: list[str]) -> list[set[str]]:
        """Each text's terms as the index's BM25 tokenizes them (stemmed, stopwords dropped)."""
        return self._sparse.terms(texts)

    def _refresh_sparse(self) -> None:
        if self._sparse_stale:
            ids = list(self.chunks)
            self._sparse.build(ids, [self.chunks[i].content or "" for i in ids])
            self._sparse_stale = False

    def vectors(self, ids: list[str]) -> np.ndarray:
        """The stored (normalised) vectors of chunks ``ids``, in that order: what a migration copies instead of re-embedding."""
        if not ids:
            return np.zeros((0, self.dim), dtype="float32")
        fids = np.asarray([self._faiss_id[cid] for cid in ids], dtype="int64")
        return self._dense.reconstruct_batch(fids)

    def get(self, ids: Iterable[str]) -> list[Document]:
        """Chunks or parents by id (missing ids are skipped)."""
        out = []
        for i in ids:
            doc = self.chunks.get(i) or self.parents.get(i)
            if doc is not None:
                out.append(doc)
        return out


def _with_collection(doc: Document) -> Document:
    """``doc`` with a valid ``meta["collection"]`` (``"default"`` when it has none)."""
    name = doc.meta.get("collection")
    if name is None:
        return replace(doc, meta={**doc.meta, "collection": DEFAULT_COLLECTION})
    check_collection_name(name)
    return doc
