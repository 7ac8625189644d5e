"""PgvectorIndex: ragkit's index API (``dense_search``, ``sparse_search``, ``add``, ``delete_source``, …)
on PostgreSQL + pgvector, through Haystack's own integration (``pgvector-haystack``).

Chunks go into a ``PgvectorDocumentStore`` table with their embeddings (normalised, so cosine is what
FAISS's inner product gives locally); dense search is ``PgvectorEmbeddingRetriever`` and keyword search
``PgvectorKeywordRetriever``; :class:`~ragkit.index.retrieval.HybridRetriever` fuses the two lists with
ragkit's own joiner, so "hybrid" means the same weights on every store. ragkit's filters
(``{"collection": ["wiki"]}``) become Haystack filters, which the store turns into SQL ``WHERE`` clauses.

What PostgreSQL does differently, and what is set here:

* **Filtered HNSW searches.** pgvector walks the HNSW graph for ``hnsw.ef_search`` candidates and only
  then applies the ``WHERE`` clause, so a 1 %-selective filter used to return a handful of rows where
  ``top_k`` match. pgvector ≥ 0.8 can keep scanning (``hnsw.iterative_scan``): every connection this
  index opens sets ``strict_order`` (results stay in distance order), with ``hnsw.ef_search`` =
  :data:`EF_SEARCH`.
* **Keyword search is BM25, as locally** (``sparse="bm25"``, the default; :mod:`ragkit.index.pg_bm25` says
  why and how), or PostgreSQL's full text through Haystack's ``PgvectorKeywordRetriever`` (``sparse="fulltext"``).
* **Which embedder wrote the table** is recorded in ``ragkit_store`` (table, embedder, dimension,
  ragkit's store format). Opening a table written by another embedder, with another dimension, or by
  a newer store format is refused with what to do, instead of mixing vectors.

Sources (file, checksum, chunk count, collection) are read from the chunks' own metadata with one
``GROUP BY``, so a second writer never sees a stale list. Writes overwrite by chunk id (ids are a hash
of source and text), so a run that stopped half-way and is run again leaves no duplicates.

Usage::

    index = PgvectorIndex("postgresql://ragkit:…@127.0.0.1:5432/ragkit", embedder="all-MiniLM-L6-v2", dim=384)
    index.add(embedded_chunks)                  # Documents with .embedding and meta["source"]
    index.dense_search(query_vector, top_k=5)
    index.sparse_search("tesla birthplace", 5, filters={"collection": ["wiki"]})
    PgvectorIndex.from_url("postgresql://ragkit@127.0.0.1:5432/ragkit?table=wiki")   # an existing table; see ragkit.index.stores
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections import Counter
from dataclasses import replace
from typing import Any, Iterable
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import numpy as np
from haystack import Document
from haystack.document_stores.types import DuplicatePolicy
from haystack.utils import Secret

from ragkit.index.filters import DEFAULT_COLLECTION
from ragkit.index.pg_bm25 import PostgresBM25Mixin
from ragkit.index.pg_catalog import STORE_FORMAT, PostgresCatalogMixin, missing_table_error, recorded_owner  # noqa: F401 (STORE_FORMAT: part of this module's API)
from ragkit.index.store_chunks import ServerStoreMixin
from ragkit.index.store_files import SourceInfo
from ragkit.index.servers import redacted, without_password
from ragkit.index.versions import EmbedderMismatchError, IndexError_, StoreUnavailableError  # noqa: F401 (part of this module's API)

EF_SEARCH = 200
DEFAULT_TABLE = "ragkit_chunks"
SPARSE_KINDS = ("bm25", "fulltext")


def with_session_settings(url: str) -> str:
    """``url`` with the pgvector settings every connection gets (``options=-c …``), kept if the user set them."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    settings = query.get("options", "")
    for name, value in (("hnsw.iterative_scan", "strict_order"), ("hnsw.ef_search", str(EF_SEARCH))):
        if name not in settings:
            settings = f"{settings} -c {name}={value}".strip()
    query["options"] = settings
    return urlunsplit(parts._replace(query=urlencode(query, quote_via=quote)))


def _quiet_store_logs() -> None:
    """pgvector-haystack logs a warning each time it finds the HNSW index it would create already there
    (every open of an existing table): expected here, so not shown to the user."""
    import logging

    logger = logging.getLogger("haystack_integrations.document_stores.pgvector.document_store")
    if not any(isinstance(f, _ExistingIndexFilter) for f in logger.filters):
        logger.addFilter(_ExistingIndexFilter())


class _ExistingIndexFilter:
    def filter(self, record) -> bool:
        return "already exists and won't be recreated" not in record.getMessage()


class PgvectorIndex(ServerStoreMixin, PostgresCatalogMixin, PostgresBM25Mixin):
    def __init__(self, url: str, embedder: str = "all-MiniLM-L6-v2", dim: int = 384, table: str = DEFAULT_TABLE,
                 language: str = "english", hnsw: bool = True, sparse: str = "bm25"):
        if not url.startswith(("postgresql://", "postgres://")):
            raise ValueError(f"a PostgreSQL store URL starts with postgresql://, not {redacted(url)!r}")
        if sparse not in SPARSE_KINDS:
            raise ValueError(f"sparse must be one of {SPARSE_KINDS}, not {sparse!r}")
        if not re.fullmatch(r"[a-z][a-z0-9_]{0,39}", table):
            raise ValueError(f"a table name is lower-case letters, digits and _ (at most 40, starting with a letter), not {table!r}")
        self.url, self.embedder, self.dim, self.table, self.language, self.hnsw = url, embedder, int(dim), table, language, hnsw
        self.sparse = sparse
        from ragkit.index.sparse import BM25sIndex

        self._tokenizer = BM25sIndex(language=language)  # tokenises only: the postings live on the server
        self._read_conn: Any = None
        self._read_lock = threading.Lock()
        self.parents: dict[str, Document] = {}  # hierarchical chunking is not stored on a server (yet): migrate refuses it
        self.path = None
        self._store: Any = None
        self._dense: Any = None
        self._sparse: Any = None

    @classmethod
    def bare(cls, url: str) -> "PgvectorIndex":
        """An unopened index on the table ``url`` names (for its write lock: no table needs to exist)."""
        parts = urlsplit(url)
        query = dict(parse_qsl(parts.query))
        table = query.pop("table", DEFAULT_TABLE)
        return cls(urlunsplit(parts._replace(query=urlencode(query, quote_via=quote))), table=table)

    @classmethod
    def from_url(cls, url: str, embedder: str | None = None, dim: int | None = None, **kwargs) -> "PgvectorIndex":
        """The index a store URL names: ``postgresql://user@host:port/db?table=name`` (``table`` is ragkit's,
        taken out before the URL reaches libpq; default :data:`DEFAULT_TABLE`). Without ``embedder`` the
        table must exist and says which embedder wrote it; with one, a new table is created on first write."""
        probe = cls.bare(url)
        url, table = probe.url, probe.table
        recorded = recorded_owner(probe._connect, table)
        if recorded is None and (embedder is None or dim is None):
            raise missing_table_error(probe.location, table)
        if recorded is not None:
            if embedder is not None and embedder != recorded[0]:
                raise EmbedderMismatchError(f"the table {table!r} at {redacted(url)} holds vectors from {recorded[0]}, not {embedder}: "
                                            f"use that embedder (RAGKIT_EMBEDDER={recorded[0]}) or another table (?table=…)")
            embedder, dim = recorded
        return cls(url, embedder=embedder, dim=dim, table=table, **kwargs)

    @property
    def location(self) -> str:
        """The URL to open this index again, without its password (a saved or exported pipeline holds no
        secret: give it as ``PGPASSWORD`` or in ``~/.pgpass``), with ``?table=`` when not the default."""
        parts = urlsplit(without_password(self.url))
        query = dict(parse_qsl(parts.query))
        if self.table != DEFAULT_TABLE:
            query["table"] = self.table
        return urlunsplit(parts._replace(query=urlencode(query, quote_via=quote)))

    # -- connecting ------------------------------------------------------------------------------
    def open(self) -> "PgvectorIndex":
        """Connect, check (or record) which embedder wrote the table, create the table if absent."""
        if self._store is not None:
            return self
        _quiet_store_logs()
        from haystack_integrations.components.retrievers.pgvector import PgvectorEmbeddingRetriever, PgvectorKeywordRetriever
        from haystack_integrations.document_stores.pgvector import PgvectorDocumentStore

        self._check_owner()
        store = PgvectorDocumentStore(
            connection_string=Secret.from_token(with_session_settings(self.url)), table_name=self.table, language=self.language,
            embedding_dimension=self.dim, vector_function="cosine_similarity", create_extension=False,
            search_strategy="hnsw" if self.hnsw else "exact_nearest_neighbor",
            hnsw_index_name=f"{self.table}_hnsw", keyword_index_name=f"{self.table}_keywords",
        )
        try:
            store.count_documents()  # creates the table and its indexes on first use
        except Exception as exc:
            raise StoreUnavailableError(f"cannot use the table {self.table!r} at {redacted(self.url)}: {exc}") from exc
        self._store = store
        self._dense = PgvectorEmbeddingRetriever(document_store=store)
        self._sparse = PgvectorKeywordRetriever(document_store=store)
        return self

    def _connect(self):
        import psycopg

        try:
            return psycopg.connect(self.url, autocommit=True, connect_timeout=10)
        except psycopg.OperationalError as exc:
            reason = " ".join(str(exc).split()) or type(exc).__name__
            if "authentication failed" in reason or "no password supplied" in reason:
                raise StoreUnavailableError(f"PostgreSQL at {redacted(self.url)} refused the login ({reason}): check the user and the "
                                            "password (in the URL, PGPASSWORD or ~/.pgpass)") from None
            raise StoreUnavailableError(f"cannot reach PostgreSQL at {redacted(self.url)}: {reason}") from None

    @contextlib.contextmanager
    def _reader(self):
        """The read connection, kept open between searches (a new login costs ~5 ms), one user at a
        time; reopened when the server dropped it."""
        import psycopg

        with self._read_lock:
            if self._read_conn is None or self._read_conn.closed or self._read_conn.broken:
                self._read_conn = self._connect()
            try:
                yield self._read_conn
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                self._read_conn = None  # the next read logs in again (the server may be back)
                reason = " ".join(str(exc).split()) or type(exc).__name__
                raise StoreUnavailableError(f"cannot read from PostgreSQL at {redacted(self.url)}: {reason}") from None
            except Exception:
                if self._read_conn.broken:
                    self._read_conn = None
                raise

    # -- writing ---------------------------------------------------------------------------------
    def add(self, chunks: Iterable[Document], parents: Iterable[Document] = (), source_hashes: dict[str, str] | None = None,
            average_length: float | None = None, source_chunks: dict[str, int] | None = None) -> int:
        """Write embedded chunks (overwriting the same ids: a rerun adds no duplicates). Returns how many.
        Each chunk records its source's checksum and chunk count (``source_chunks``, default: counted in
        this call), so a source whose writing stopped half-way is seen as incomplete and indexed again.
        ``average_length``: the corpus's mean chunk length in tokens for BM25 (a migration knows it; by
        default the mean of what the store holds plus these chunks)."""
        if list(parents):
            raise ValueError("hierarchical (parent) chunks are not stored on PostgreSQL yet: index with flat chunks")
        self.open()
        chunks = list(chunks)
        per_source = Counter(d.meta.get("source", "") for d in chunks)
        rows = []
        for doc in chunks:
            if doc.embedding is None:
                raise ValueError(f"chunk {doc.id} has no embedding; run it through an embedder first")
            if len(doc.embedding) != self.dim:
                raise EmbedderMismatchError(f"chunk {doc.id} has a {len(doc.embedding)}-d embedding; this store holds {self.dim}-d vectors from {self.embedder}")
            vector = np.asarray(doc.embedding, dtype="float32")
            norm = float(np.linalg.norm(vector)) or 1.0
            meta = {**doc.meta, "collection": doc.meta.get("collection") or DEFAULT_COLLECTION}
            digest = (source_hashes or {}).get(meta.get("source", ""))
            if digest:
                meta["source_sha256"] = digest
                meta["source_chunks"] = (source_chunks or per_source)[meta.get("source", "")]
            rows.append(replace(doc, embedding=(vector / norm).tolist(), meta=meta, score=None))
        if not rows:
            return 0
        # postings first: a write that stops between the two leaves the file short of chunks (indexed again by
        # the next run, whose rewrite of the same chunk ids replaces the postings), never chunks without postings
        self._call("writing BM25 postings", self._write_postings, chunks=rows, average_length=average_length)
        return self._call("writing chunks", self._store.write_documents, documents=rows, policy=DuplicatePolicy.OVERWRITE)

    def analyze(self) -> None:
        """Refresh the planner's statistics after a bulk write (a migration ends with it), so its
        row estimates for filters and joins are those of the table as written."""
        self.open()
        with self._connect() as conn:
            conn.execute(f'ANALYZE "{self.table}", {self.table}_postings, {self.table}_terms, {self.table}_lengths')

    def delete_source(self, source: str) -> int:
        return self._call("deleting a source", self._delete_source, source=source)

    def _delete_source(self, source: str) -> int:
        self.open()
        with self._connect() as conn, conn.transaction():
            ids = [r[0] for r in conn.execute(f"SELECT id FROM {self.table} WHERE meta->>'source' = %s", (source,)).fetchall()]
            conn.execute(f"LOCK TABLE {self.table}_terms IN SHARE ROW EXCLUSIVE MODE")
            self._drop_postings(conn, ids)
        return self._store.delete_by_filter({"field": "meta.source", "operator": "==", "value": source})

    def count_ids(self, ids: list[str]) -> int:
        """How many of ``ids`` the table holds."""
        self.open()
        with self._reader() as conn:
            return sum(conn.execute(f'SELECT count(*) FROM "{self.table}" WHERE id = ANY(%s)', (ids[i:i + 10000],)).fetchone()[0]
                       for i in range(0, len(ids), 10000))

    def _call(self, what: str, fn, **kwargs):
        """``fn(**kwargs)``; a store failure (the server went away, a dropped table) becomes a
        :class:`StoreUnavailableError` naming the step and the URL, for the trace to show."""
        import psycopg
        from haystack.document_stores.errors import DocumentStoreError

        try:
            return fn(**kwargs)
        except (DocumentStoreError, psycopg.OperationalError, psycopg.InterfaceError) as exc:
            cause = exc.__cause__ or exc
            reason = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
            raise StoreUnavailableError(f"{what} failed on {redacted(self.url)}: {reason}") from None

    # -- reading ---------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._call("counting chunks", self.open()._store.count_documents)

    def __bool__(self) -> bool:
        """Whether the table holds any chunk: one indexed row, where ``len`` counts them all (asked per search)."""
        self.open()
        with self._reader() as conn:
            return conn.execute(f"SELECT EXISTS (SELECT 1 FROM {self.table})").fetchone()[0]

    def dense_search(self, query_embedding, top_k: int, filters: dict | None = None) -> list[Document]:
        """The ``top_k`` chunks nearest the query (cosine), among those ``filters`` admits."""
        if top_k <= 0:
            return []
        query = self._unit_query(query_embedding)
        self.open()
        found = self._call("dense search", self._dense.run, query_embedding=query, top_k=top_k, filters=self._haystack_filters(filters))["documents"]
        return [replace(d, embedding=None) for d in found]

    def sparse_search(self, query: str, top_k: int, filters: dict | None = None) -> list[Document]:
        """The ``top_k`` chunks with the best positive BM25 score among those ``filters`` admits (with
        ``sparse="fulltext"``: PostgreSQL full text, every word must match, ranked by ``ts_rank_cd``)."""
        if top_k <= 0 or not query.strip():
            return []
        self.open()
        if self.sparse == "fulltext":
            found = self._call("keyword search", self._sparse.run, query=query, top_k=top_k, filters=self._haystack_filters(filters))["documents"]
            return [replace(d, embedding=None) for d in found]
        return self._bm25_search(query, top_k, filters)

    def get(self, ids: Iterable[str]) -> list[Document]:
        wanted = list(ids)
        if not wanted:
            return []
        self.open()
        found = {d.id: replace(d, embedding=None)
                 for d in self._call("reading chunks", self._store.filter_documents, filters={"field": "id", "operator": "in", "value": wanted})}
        return [found[i] for i in wanted if i in found]

    def filter_ids(self, filters: dict | None) -> bool | None:
        """Whether any chunk matches ``filters`` (None: no filter). A server store does not list ids."""
        converted = self._haystack_filters(filters)
        if converted is None:
            return None
        return self.open()._store.count_documents_by_filter(converted) > 0

    def meta_fields(self) -> set[str]:
        self.open()
        with self._reader() as conn:
            rows = conn.execute(f'SELECT DISTINCT jsonb_object_keys(meta) FROM (SELECT meta FROM "{self.table}" LIMIT 2000) s').fetchall()
        return {r[0] for r in rows if not r[0].startswith("_")}

    @property
    def sources(self) -> dict[str, SourceInfo]:
        """Each source file held: its checksum, chunk count and collection (one GROUP BY on the server). A
        source with fewer chunks than it recorded (its writing stopped) has no checksum: the next
        ``ragkit index`` run indexes it again."""
        self.open()
        with self._reader() as conn:
            rows = conn.execute(
                f"SELECT meta->>'source', max(meta->>'source_sha256'), count(*), max(meta->>'collection'), max((meta->>'source_chunks')::int) "
                f"FROM \"{self.table}\" GROUP BY 1"
            ).fetchall()
        return {src or "": SourceInfo(sha256=(sha or "") if expected in (None, n) else "", chunks=n, collection=coll or DEFAULT_COLLECTION)
                for src, sha, n, coll, expected in rows}
