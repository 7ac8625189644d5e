"""Saving and loading a :class:`~ragkit.index.store.RagIndex`: its files, versions and checksums.

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

Saving writes a new version and swaps one pointer file, under an inter-process lock
(:func:`index_write_lock`, the ``filelock`` package), so concurrent writers queue instead of
overwriting each other, and a crash or a concurrent reader sees the old or the new index. Loading
verifies the manifest's format version, embedder and checksums before FAISS reads a byte: a
corrupted or foreign index is refused with :class:`IndexError_` subclasses and a message that says
what to do, never half-loaded.

Apart from :mod:`ragkit.index.store` (the chunk table and its searches) because none of this is
searching; ``RagIndex`` inherits :class:`IndexFilesMixin`, so ``RagIndex.save``/``RagIndex.load`` stay.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

import faiss
from haystack import Document

from ragkit.index import versions
from ragkit.index.filters import DEFAULT_COLLECTION, check_collection_name
from ragkit.index.records import doc_record, read_jsonl, sha256, write_jsonl
from ragkit.index.sparse import BM25sIndex
from ragkit.index.versions import EmbedderMismatchError, IndexCorruptedError, IndexNotFoundError, IndexVersionError, index_write_lock

INDEX_FORMAT_VERSION = 1
_FILES = ("chunks.jsonl", "parents.jsonl", "dense.faiss", "sparse/sparse.json")
# A reader whose version folder is removed under it (a save finished meanwhile) re-reads CURRENT
# and tries again. A retry fails only if yet another save lands inside its load, which a writer
# saving back to back on a loaded machine can do several times in a row, so the reader keeps trying
# (backing off) for a time budget rather than a fixed few attempts; only a writer that never
# pauses that long starves it.
_LOAD_RETRY_BUDGET_S = 10.0
_LOAD_BACKOFF_MAX_S = 0.2


@dataclass
class SourceInfo:
    sha256: str
    chunks: int
    indexed_at: float = field(default_factory=time.time)
    collection: str = DEFAULT_COLLECTION  # every chunk of a source is in one collection


def _folder_bytes(folder: Path) -> int:
    try:
        return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    except OSError:
        return 0


def _mb(n: int) -> str:
    return f"{n / 2**20:,.1f} MB"


class IndexFilesMixin:
    """Persistence of :class:`~ragkit.index.store.RagIndex`, which inherits it: it reads and sets the
    index's chunk table, FAISS and bm25s indexes and manifest fields."""

    # -- persistence -------------------------------------------------------------------------
    def save(self, path: str | Path, lock_timeout: float | None = None) -> None:
        """Write the index to the folder ``path`` as a new version and swap it in: a crash at any
        point, or a reader at any moment, sees the previous index or this one, whole."""
        path = Path(path)
        self._refresh_sparse()
        with index_write_lock(path, lock_timeout):
            self._writing = "a new version folder"
            try:
                folder = versions.new_version_dir(path)
            except OSError as exc:
                self._raise_write_error(exc, path, 0)
                raise
            versions.fault_point("version folder created")
            try:
                self._write_version(folder)
            except BaseException as exc:
                written = _folder_bytes(folder)
                shutil.rmtree(folder, ignore_errors=True)
                self._raise_write_error(exc, path, written)
                raise
            try:
                versions.publish(path, folder)
            except BaseException as exc:
                if versions.read_current(path) != folder:  # not live: unpublish it, manifest first
                    (folder / versions.MANIFEST).unlink(missing_ok=True)
                    shutil.rmtree(folder, ignore_errors=True)
                    self._writing = "the pointer to the new version (CURRENT)"
                    self._raise_write_error(exc, path, 0)
                raise
            self.path = path
            versions.prune(path, keep=folder)

    def _raise_write_error(self, exc: BaseException, path: Path, written: int) -> None:
        """A full disk or an unwritable folder as one clear :class:`IndexWriteError` (the partial version
        is already removed and nothing live changed); any other exception is left to the caller."""
        if not isinstance(exc, OSError) or exc.errno not in versions.NO_SPACE + versions.NOT_WRITABLE:
            return
        if exc.errno in versions.NOT_WRITABLE:
            raise versions.not_writable(path, exc) from None
        free = shutil.disk_usage(path).free
        needed = max(self._estimated_bytes(), written)
        raise versions.IndexWriteError(
            f"no space left on the device of {path} while writing {self._writing}: this version of the index needs about "
            f"{_mb(needed)} ({_mb(written)} written when the disk filled; {_mb(free)} free now, and the previous version stays "
            "until the new one is complete). The index is unchanged and the partial version was removed; free some space "
            "(or use --index-dir on a larger disk) and run the same command again"
        ) from None

    def _estimated_bytes(self) -> int:
        """About what :meth:`_write_version` writes: the chunk records, the vectors (HNSW adds its graph), the bm25s files."""
        text = sum(len(d.content or "") for d in self.chunks.values()) + sum(len(d.content or "") for d in self.parents.values())
        records = int(1.2 * text) + 300 * (len(self.chunks) + len(self.parents))
        vectors = self._dense.ntotal * self.dim * 4 * (2 if "hnsw" in str(self.dense_index).lower() else 1)
        return records + vectors + text // 2

    def _write_version(self, tmp: Path) -> None:
        self._writing = "chunks.jsonl"
        write_jsonl(tmp / "chunks.jsonl", ({**doc_record(d), "faiss_id": self._faiss_id[d.id]} for d in self.chunks.values()))
        versions.fault_point("chunks.jsonl written")
        self._writing = "parents.jsonl"
        write_jsonl(tmp / "parents.jsonl", (doc_record(d) for d in self.parents.values()))
        versions.fault_point("parents.jsonl written")
        self._writing = "dense.faiss (the vectors)"
        faiss.write_index(self._dense, str(tmp / "dense.faiss"))
        versions.fault_point("dense.faiss written")
        self._writing = "sparse/ (the bm25s keyword index)"
        self._sparse.save(tmp / "sparse")
        versions.fault_point("sparse written")
        self._writing = "manifest.json"
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
    def load(cls, path: str | Path, expected_embedder: str | None = None) -> Self:
        path = Path(path)
        failure: Exception | None = None
        deadline = time.monotonic() + _LOAD_RETRY_BUDGET_S
        attempt = 0
        while attempt == 0 or time.monotonic() < deadline:
            attempt += 1
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
                time.sleep(min(0.01 * 2**attempt, _LOAD_BACKOFF_MAX_S))
                continue
            index.path = path
            return index
        raise IndexCorruptedError(
            f"Index at {path} kept changing while it was read ({attempt} loads in {_LOAD_RETRY_BUDGET_S:.0f} s each "
            "overtaken by a save); "
            f"try again. Last error: {failure}"
        )

    @classmethod
    def _load_folder(cls, folder: Path, path: Path, expected_embedder: str | None) -> Self:
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
