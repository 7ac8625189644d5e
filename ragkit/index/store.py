"""The on-disk index: one chunk table shared by a FAISS dense index and a bm25s sparse index.

Layout of one index version (format version :data:`INDEX_FORMAT_VERSION`)::

    manifest.json    format, versions, embedder, dimension, root, sources, collections (name ->
                     description), sha256 of every file below
    chunks.jsonl     one chunk per line: id, content, meta (with its "collection"), FAISS integer id
    parents.jsonl    parent blocks of hierarchical chunking (may be empty)
    dense.faiss      FAISS native IndexIDMap2 over L2-normalised vectors (cosine): exact IndexFlatIP, or
                     IndexHNSWFlat once an "auto" index passes HNSW_THRESHOLD chunks
    sparse/          bm25s arrays (np.save, allow_pickle=False) + row → chunk id list

An index directory holds such versions under ``versions/`` and a ``CURRENT`` pointer
(:mod:`ragkit.index.versions`); a directory written before that layout, with these files directly
in it, still loads and is converted by its next save.

Why faiss-cpu directly instead of faiss-haystack's ``FAISSDocumentStore``: that store keeps every
chunk's embedding twice — in FAISS and as a Python ``list[float]`` on the Document — persists the
embeddings as JSON text, and has no sparse side. Measured at 20k chunks (bench/faiss_store_memory.py):
394 MB resident and 207 MB on disk against 168 MB and 46 MB here (bm25s index included), and 22 s
against 3 s to build and save. Here vectors live only in FAISS and both retrievers share one table.

Saving writes a new version and swaps one pointer file, under an inter-process lock
(:func:`index_write_lock`, the ``filelock`` package), so concurrent writers queue instead of
overwriting each other, and a crash or a concurrent reader sees the old or the new index. Loading
verifies the manifest's format version, embedder and checksums before FAISS reads a byte: a
corrupted or foreign index is refused with :class:`IndexError_` subclasses and a message that says
what to do, never half-loaded.

Collections: every chunk carries ``meta["collection"]`` (a slug, ``"default"`` unless the indexer
was given one) and :attr:`RagIndex.collections` maps each collection to its description. An index
written before collections existed loads with all of its chunks in ``"default"``. Searches take
an optional metadata filter (:mod:`ragkit.index.filters`); the chunks it admits are found through
per-field postings, and FAISS (an ``IDSelectorBatch``) and bm25s (a ``weight_mask``) search only
those, so a filtered search returns the true top-k of the matching chunks, not a post-filtered
remainder of the unfiltered top-k.
"""

from __future__ import annotations

import itertools
import json
import shutil
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable

import faiss
import numpy as np
from haystack import Document

from ragkit.index import versions
from ragkit.index.filters import DEFAULT_COLLECTION, FilterError, check_collection_name, filter_key, is_haystack_filter, normalize_filters
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
from ragkit.index.records import doc_record, read_jsonl, sha256, unstorable, write_jsonl
from ragkit.index.sparse import BM25sIndex

DEFAULT_INDEX_DIR = ".ragkit/index"  # where the CLI, the notebooks and AgenticRAG look unless told otherwise
INDEX_FORMAT_VERSION = 1
# Exact search scans every vector: ~0.15 ms per 1k chunks of 384-d on one core, memory-bound.
# Past this size an "auto" index switches to HNSW. bench/hnsw_recall.py at 101k chunks: exact
# 14.8 ms; HNSW recall@10 vs exact 0.82 / 0.92 / 0.95 at efSearch 96 / 256 / 512, in 0.2 / 0.35 / 0.6 ms.
HNSW_THRESHOLD = 50_000
HNSW_M = 32
HNSW_EF_CONSTRUCTION = 80
HNSW_EF_SEARCH = 512
_FILES = ("chunks.jsonl", "parents.jsonl", "dense.faiss", "sparse/sparse.json")
# A reader whose version folder is removed under it (a save finished meanwhile) re-reads CURRENT;
# each retry needs another complete save to land inside one load, so a few are plenty.
_LOAD_ATTEMPTS = 6
_FILTER_CACHE_SIZE = 128  # distinct filters whose matching chunks are kept until the index changes


@dataclass
class SourceInfo:
    sha256: str
    chunks: int
    indexed_at: float = field(default_factory=time.time)
    collection: str = DEFAULT_COLLECTION  # every chunk of a source is in one collection


@dataclass
class _Matching:
    """The chunks one filter admits, in the forms each search needs (built once per filter)."""

    ids: frozenset[str]
    fids: np.ndarray  # FAISS ids, int64
    selector: object = None  # faiss.IDSelectorBatch over fids, built on the first dense search
    sparse_mask: np.ndarray | None = None  # 1.0 on the bm25s rows of ids, built on the first sparse search


class RagIndex:
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

    def prune_collections(self) -> list[str]:
        """Drop the descriptions of collections that no longer hold a chunk; returns their names."""
        held = self.collection_counts()
        gone = [name for name in self.collections if name not in held]
        for name in gone:
            del self.collections[name]
        return gone

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

    def get(self, ids: Iterable[str]) -> list[Document]:
        """Chunks or parents by id (missing ids are skipped)."""
        out = []
        for i in ids:
            doc = self.chunks.get(i) or self.parents.get(i)
            if doc is not None:
                out.append(doc)
        return out

    # -- persistence -------------------------------------------------------------------------
    def save(self, path: str | Path, lock_timeout: float | None = None) -> None:
        """Write the index to the folder ``path`` as a new version and swap it in: a crash at any
        point, or a reader at any moment, sees the previous index or this one, whole."""
        path = Path(path)
        self._refresh_sparse()
        with index_write_lock(path, lock_timeout):
            folder = versions.new_version_dir(path)
            versions.fault_point("version folder created")
            try:
                self._write_version(folder)
            except BaseException:
                shutil.rmtree(folder, ignore_errors=True)
                raise
            try:
                versions.publish(path, folder)
            except BaseException:
                if versions.read_current(path) != folder:  # not live: unpublish it, manifest first
                    (folder / versions.MANIFEST).unlink(missing_ok=True)
                    shutil.rmtree(folder, ignore_errors=True)
                raise
            self.path = path
            versions.prune(path, keep=folder)

    def _write_version(self, tmp: Path) -> None:
        write_jsonl(tmp / "chunks.jsonl", ({**doc_record(d), "faiss_id": self._faiss_id[d.id]} for d in self.chunks.values()))
        versions.fault_point("chunks.jsonl written")
        write_jsonl(tmp / "parents.jsonl", (doc_record(d) for d in self.parents.values()))
        versions.fault_point("parents.jsonl written")
        faiss.write_index(self._dense, str(tmp / "dense.faiss"))
        versions.fault_point("dense.faiss written")
        self._sparse.save(tmp / "sparse")
        versions.fault_point("sparse written")
        files = {rel: sha256(tmp / rel) for rel in _FILES}
        for extra in sorted((tmp / "sparse" / "bm25s").glob("*")) if (tmp / "sparse" / "bm25s").is_dir() else []:
            files[f"sparse/bm25s/{extra.name}"] = sha256(extra)
        versions.fsync_tree(tmp)
        versions.fault_point("files fsynced")
        from ragkit import __version__

        manifest = {
            "format": "ragkit-index",
            "format_version": INDEX_FORMAT_VERSION,
            "ragkit_version": __version__,
            "embedder": self.embedder,
            "dim": self.dim,
            "sparse_language": self._sparse.language,
            "dense_index": self.dense_index,
            "chunks": len(self.chunks),
            "next_faiss_id": self._next_faiss_id,
            "root": self.root,
            "sources": {s: vars(info) for s, info in self.sources.items()},
            "collections": {name: self.collections.get(name, "") for name in sorted(self.collection_counts())},
            "files": files,
        }
        # last, and atomically: a version folder without its manifest is incomplete and never read
        versions.write_file_durably(tmp / versions.MANIFEST, json.dumps(manifest, indent=1).encode("utf-8"), "manifest.json")

    @classmethod
    def exists(cls, path: str | Path) -> bool:
        """True for an index folder in either layout (versioned, or flat from before)."""
        path = Path(path)
        return (path / versions.CURRENT).is_file() or versions.live_dir(path) is not None

    @classmethod
    def live_dir(cls, path: str | Path) -> Path | None:
        """The folder holding the files of the index ``path`` serves now (None: no index)."""
        return versions.live_dir(path)

    @classmethod
    def load(cls, path: str | Path, expected_embedder: str | None = None) -> "RagIndex":
        path = Path(path)
        failure: Exception | None = None
        for attempt in range(_LOAD_ATTEMPTS):
            folder = versions.live_dir(path)
            if folder is None:
                raise IndexNotFoundError(f"No ragkit index at {path} (no CURRENT or manifest.json). Build one with: ragkit index <folder>")
            try:
                index = cls._load_folder(folder, path, expected_embedder)
            except (IndexVersionError, EmbedderMismatchError):
                raise  # a property of the index itself, whichever version is read
            except Exception as exc:
                if versions.live_dir(path) == folder:
                    raise  # the live version itself is bad, not one a save replaced while we read it
                failure = exc
                time.sleep(0.01 * (attempt + 1))
                continue
            index.path = path
            return index
        raise IndexCorruptedError(
            f"Index at {path} kept changing while it was read ({_LOAD_ATTEMPTS} saves in a row landed during one load); "
            f"try again. Last error: {failure}"
        )

    @classmethod
    def _load_folder(cls, folder: Path, path: Path, expected_embedder: str | None) -> "RagIndex":
        manifest_path = folder / "manifest.json"
        if not manifest_path.is_file():
            raise IndexCorruptedError(f"Index at {path}: version {folder.name} has no manifest.json; rebuild the index with: ragkit index <folder> --rebuild")
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise IndexCorruptedError(f"{manifest_path} is not valid JSON ({exc}); rebuild the index with: ragkit index <folder> --rebuild") from exc
        if not isinstance(manifest, dict) or manifest.get("format") != "ragkit-index":
            raise IndexCorruptedError(f"{path} does not hold a ragkit index manifest")
        if manifest.get("format_version") != INDEX_FORMAT_VERSION:
            raise IndexVersionError(
                f"Index at {path} has format version {manifest.get('format_version')} (written by ragkit "
                f"{manifest.get('ragkit_version')}); this ragkit reads version {INDEX_FORMAT_VERSION}. "
                "Rebuild it with: ragkit index <folder> --rebuild"
            )
        if expected_embedder is not None and manifest.get("embedder") != expected_embedder:
            raise EmbedderMismatchError(
                f"Index at {path} was built with embedder {manifest.get('embedder')!r} but {expected_embedder!r} "
                "is configured; query vectors would not be comparable. Rebuild the index or change the embedder."
            )
        for rel, digest in manifest.get("files", {}).items():
            file = folder / rel
            if not file.is_file() or sha256(file) != digest:
                raise IndexCorruptedError(
                    f"Index file {file} is missing or corrupted (checksum mismatch); rebuild the index with: "
                    "ragkit index <folder> --rebuild"
                )
        index = cls(
            embedder=manifest["embedder"], dim=manifest["dim"], sparse_language=manifest.get("sparse_language", "english"),
            dense_index=manifest.get("dense_index", "auto"),
        )
        checked: set[str] = set()
        for record in read_jsonl(folder / "chunks.jsonl"):
            fid = int(record.pop("faiss_id"))
            doc = Document(**_record_collection(record, checked, path))  # a chunk from before collections is in "default"
            index.chunks[doc.id] = doc
            index._faiss_id[doc.id] = fid
            index._chunk_at[fid] = doc.id
        for record in read_jsonl(folder / "parents.jsonl"):
            doc = Document(**_record_collection(record, checked, path))
            index.parents[doc.id] = doc
        index._dense = faiss.read_index(str(folder / "dense.faiss"))
        if index._dense.ntotal != len(index.chunks) or index._dense.d != index.dim:
            raise IndexCorruptedError(f"Index at {path}: FAISS holds {index._dense.ntotal} vectors for {len(index.chunks)} chunks")
        index._sparse = BM25sIndex.load(folder / "sparse")
        if len(index._sparse) != len(index.chunks):
            raise IndexCorruptedError(f"Index at {path}: sparse index rows do not match the chunk table")
        index._next_faiss_id = int(manifest.get("next_faiss_id", len(index.chunks)))
        index.root = manifest.get("root")
        index.sources = {s: SourceInfo(**info) for s, info in manifest.get("sources", {}).items()}
        collections = manifest.get("collections", {})
        if not isinstance(collections, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in collections.items()):
            raise IndexCorruptedError(f"Index at {path}: the manifest's collections are not a mapping of names to descriptions")
        index.collections = {name: collections.get(name, "") for name in sorted(index.collection_counts())}
        return index


def _record_collection(record: dict, checked: set[str], path: Path) -> dict:
    """A chunk record read from disk, its meta given ``"collection": "default"`` if it has none."""
    if record.get("meta") is None:
        record["meta"] = {}
    meta = record["meta"]
    if not isinstance(meta, dict):
        raise IndexCorruptedError(f"Index at {path}: chunk {record.get('id')!r} has no metadata mapping; rebuild the index with: ragkit index <folder> --rebuild")
    name = meta.setdefault("collection", DEFAULT_COLLECTION)
    if name not in checked:
        try:
            checked.add(check_collection_name(name))
        except ValueError as exc:
            raise IndexCorruptedError(f"Index at {path}: chunk {record.get('id')!r}: {exc}") from None
    return record


def _with_collection(doc: Document) -> Document:
    """``doc`` with a valid ``meta["collection"]`` (``"default"`` when it has none)."""
    name = doc.meta.get("collection")
    if name is None:
        return replace(doc, meta={**doc.meta, "collection": DEFAULT_COLLECTION})
    check_collection_name(name)
    return doc
