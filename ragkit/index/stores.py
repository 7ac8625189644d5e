"""Where an index lives: a local folder (the default) or a server store named by a URL.

Everything that opens an index (the engine, the retrievers' ``index_path``, the CLI's ``--store`` /
``--index-dir``) goes through :func:`load_index`, so one config line moves a notebook from the local
FAISS + bm25s folder to a server:

* ``.ragkit/index`` (any path): :class:`~ragkit.index.store.RagIndex`;
* ``postgresql://user@host:5432/db?table=name``: :class:`~ragkit.index.pgvector_index.PgvectorIndex`
  (PostgreSQL + pgvector through ``pgvector-haystack``);
* ``milvus://host:19530?collection=name``: :class:`~ragkit.index.milvus_index.MilvusIndex`
  (Milvus through ``milvus-haystack``; ``milvus-lite``'s server locally, a real Milvus or Zilliz in production).

A store URL given without its password (``location``) is what pipelines record: the password comes
from ``PGPASSWORD`` / ``~/.pgpass`` (PostgreSQL) or ``MILVUS_TOKEN`` (Milvus), never from exported YAML.

:func:`migrate` copies a local index into a store with the vectors it has (no re-embedding).

Usage::

    index = load_index("postgresql://ragkit@127.0.0.1:5432/ragkit", expected_embedder="all-MiniLM-L6-v2")
    local = RagIndex.load(".ragkit/index")
    migrate(local, open_store("milvus://127.0.0.1:19530", embedder=local.embedder, dim=local.dim))
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from ragkit.index.servers import without_password  # noqa: F401 (part of this module's API)
from ragkit.index.versions import EmbedderMismatchError, IndexError_

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
MILVUS_SCHEMES = ("milvus://", "milvus+https://")


def is_store_url(location: Any) -> bool:
    return isinstance(location, str) and location.startswith(POSTGRES_SCHEMES + MILVUS_SCHEMES)


def open_store(url: str, embedder: str | None = None, dim: int | None = None):
    """The server store ``url`` names. Without ``embedder``/``dim`` it must already hold a ragkit index
    (which records them); with both, a new one is created on first write."""
    if url.startswith(POSTGRES_SCHEMES):
        from ragkit.index.pgvector_index import PgvectorIndex

        return PgvectorIndex.from_url(url, embedder=embedder, dim=dim)
    if url.startswith(MILVUS_SCHEMES):
        from ragkit.index.milvus_index import MilvusIndex

        return MilvusIndex.from_url(url, embedder=embedder, dim=dim)
    raise ValueError(f"not a store URL (postgresql://… or milvus://…): {url!r}")


def load_index(location: str | Path, expected_embedder: str | None = None):
    """The index at ``location``: a store URL or a local folder (``RagIndex.load``)."""
    if is_store_url(location):
        return open_store(str(location), embedder=expected_embedder)
    from ragkit.index.store import RagIndex

    return RagIndex.load(location, expected_embedder=expected_embedder)


def index_exists(location: str | Path) -> bool:
    if is_store_url(location):
        from ragkit.index.versions import IndexNotFoundError

        try:
            open_store(str(location))
            return True
        except IndexNotFoundError:
            return False
    from ragkit.index.store import RagIndex

    return RagIndex.exists(location)


def store_write_lock(url: str, timeout: float | None = None):
    """The store's inter-process write lock (taken before its table or collection need exist)."""
    if url.startswith(POSTGRES_SCHEMES):
        from ragkit.index.pgvector_index import PgvectorIndex

        return PgvectorIndex.bare(url).write_lock(timeout)
    from ragkit.index.milvus_index import MilvusIndex

    return MilvusIndex.bare(url).write_lock(timeout)


def index_location(index) -> str | None:
    """What a component records to open ``index`` again: a local index's folder, a store's URL (no password)."""
    if getattr(index, "path", None):
        return str(index.path)
    return getattr(index, "location", None)


def migrate(local, target, batch_size: int = 500, progress: Callable[[int], None] | None = None) -> dict[str, int]:
    """Copy every chunk of a local :class:`~ragkit.index.store.RagIndex` into the store ``target`` with the vectors
    it already has (no re-embedding), with its root and collection descriptions, under the store's write
    lock; then check the counts. Returns ``{"chunks": n, "written": n, "in_store": n}``; raises when the store
    holds a different number of this index's chunks afterwards. Running it again overwrites, never duplicates."""
    if local.parents:
        raise ValueError("this index has hierarchical (parent) chunks, which a server store does not hold yet: index with flat chunks")
    if local.embedder != target.embedder or local.dim != target.dim:
        raise EmbedderMismatchError(f"the local index holds {local.dim}-d vectors from {local.embedder}; the store expects {target.dim}-d from {target.embedder}")
    target.open()
    ids = list(local.chunks)
    hashes = {src: info.sha256 for src, info in local.sources.items()}
    counts = Counter(local.chunks[i].meta.get("source", "") for i in ids)
    # BM25 needs the corpus's mean length; a migration knows it before the first batch
    average = statistics.mean(len(t) for t in target._tokenizer.tokens([local.chunks[i].content or "" for i in ids])) if ids else None
    written = 0
    with target.write_lock():
        for start in range(0, len(ids), batch_size):
            part = ids[start:start + batch_size]
            vectors = local.vectors(part)
            docs = [replace(local.chunks[cid], embedding=vec.tolist()) for cid, vec in zip(part, vectors)]
            written += target.add(docs, source_hashes=hashes, average_length=average, source_chunks=counts)
            if progress is not None:
                progress(len(part))
        if local.root:
            target.set_root(local.root)
        for name, description in local.collections.items():
            if description:
                target.set_description(name, description)
        target.analyze()
    held = target.count_ids(ids) if ids else 0
    if held != len(ids):
        raise IndexError_(f"migration incomplete: {held} of {len(ids)} chunks are in the store; run it again (it overwrites, never duplicates)")
    return {"chunks": len(ids), "written": written, "in_store": held}
