"""MilvusIndex: ragkit's index API (``dense_search``, ``sparse_search``, ``add``, ``delete_source``, …) on
Milvus, through Haystack's own integration (``milvus-haystack``).

Chunks go into one Milvus collection through ``MilvusDocumentStore``: the normalised embedding in an HNSW
(cosine) field, the metadata as dynamic fields, and a ``bm25_text`` field that Milvus's **built-in BM25
function** turns into a sparse vector on the server. Dense search is ``MilvusEmbeddingRetriever``,
keyword search ``MilvusSparseEmbeddingRetriever`` (BM25 on the server), fused by
:class:`~ragkit.index.retrieval.HybridRetriever` with ragkit's own joiner, so "hybrid" means the same
weights as on the local index and on PostgreSQL. ragkit's filters become Haystack filters, which the
store turns into Milvus boolean expressions on the dynamic fields.

What Milvus does differently, and what is set here:

* **BM25 terms.** The server's analyzer splits words without stemming (Milvus Lite's "standard"
  analyzer), so the local bm25s index and Milvus would score different terms. ``bm25_text`` holds the
  chunk's tokens as ragkit's own BM25 tokenizer makes them (stemmed, stop words dropped), and a query
  is tokenized the same way, so both stores score the same terms with the same ``k1``/``b``; the text
  the reader sees is kept beside it (``ragkit_content``). Milvus's BM25 multiplies each term by
  ``k1 + 1``; scores are divided by it to read as bm25s's.
* **Filtered HNSW searches.** Milvus applies the filter expression inside the vector search (a
  filtered HNSW walk in Milvus, an id selector over each segment's FAISS index in Milvus Lite), so a
  1 %-selective filter still returns ``top_k`` when that many match; ``ef`` = :data:`EF_SEARCH`.
* **Which embedder wrote the collection** and its root folder and collection descriptions are one row
  of the ``ragkit_store`` collection. Another embedder's or dimension's collection is refused.
* **One writer at a time**: Milvus has no lock a client can take, so writers on *this machine* queue
  on a file lock named after the URL and collection (two machines indexing one collection at once are
  not serialized; ids are content hashes, so a rerun still never duplicates).

Milvus Lite (``milvus-lite server``, :func:`ragkit.index.servers.start_milvus`) is a re-implementation of
Milvus for local work; in production the URL names a real Milvus or Zilliz Cloud, which the same client
code talks to. URL: ``milvus://host:19530?collection=name`` (``milvus+https://`` for TLS); a token from
``MILVUS_TOKEN`` or the URL's ``user:password``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections import Counter
from typing import Any, Iterable
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import numpy as np
from haystack import Document
from haystack.document_stores.types import DuplicatePolicy

from ragkit.index.filters import DEFAULT_COLLECTION, FilterError, check_collection_name
from ragkit.index.milvus_catalog import CATALOG, STORE_FORMAT, MilvusCatalogMixin, _reason, literal  # noqa: F401 (CATALOG, STORE_FORMAT: this module's API)
from ragkit.index.store_chunks import ServerStoreMixin
from ragkit.index.store_files import SourceInfo
from ragkit.index.versions import EmbedderMismatchError, IndexError_, IndexNotFoundError, StoreUnavailableError

EF_SEARCH = 200
DEFAULT_COLLECTION_NAME = "ragkit_chunks"
BM25_K1, BM25_B = 1.5, 0.75  # bm25s's, as the local index uses them
TEXT, CONTENT, SPARSE = "bm25_text", "ragkit_content", "sparse"
HIDDEN = {TEXT, CONTENT, "source_sha256", "source_chunks"}
# one connection per index object, and gRPC subchannels of its own: gRPC's process-wide pool keeps a server
# that went away in reconnect backoff for every later client, so one that is back would stay unreachable;
# keepalive pings every 5 min, not pymilvus's 10 s, which gRPC servers' default policy answers with "too_many_pings"
CONNECTION_OPTIONS = {"dedicated": True, "grpc_options": {"grpc.use_local_subchannel_pool": 1, "grpc.keepalive_time_ms": 300_000}}


class MilvusIndex(ServerStoreMixin, MilvusCatalogMixin):
    def __init__(self, uri: str, collection: str = DEFAULT_COLLECTION_NAME, embedder: str = "all-MiniLM-L6-v2", dim: int = 384,
                 token: str | None = None, language: str = "english"):
        import re

        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,254}", collection):
            raise ValueError(f"a Milvus collection name is letters, digits and _ (starting with a letter or _), not {collection!r}")
        self.uri, self.collection, self.embedder, self.dim, self.language = uri, collection, embedder, int(dim), language
        self._token = token
        from ragkit.index.sparse import BM25sIndex

        self._tokenizer = BM25sIndex(language=language)  # tokenises only: BM25 is scored on the server
        self.parents: dict[str, Document] = {}
        self.path = None
        self._store: Any = None
        self._dense: Any = None
        self._sparse: Any = None
        self._client_lock = threading.Lock()
        self._own_client: Any = None
        self._catalog_loaded = False
        self._seen_collection = False

    # -- naming ----------------------------------------------------------------------------------
    @classmethod
    def bare(cls, url: str) -> "MilvusIndex":
        """An unopened index on the collection ``url`` names (``milvus://host:port?collection=name``)."""
        parts = urlsplit(url)
        query = dict(parse_qsl(parts.query))
        collection = query.pop("collection", DEFAULT_COLLECTION_NAME)
        scheme = "https" if parts.scheme == "milvus+https" else "http"
        token = os.environ.get("MILVUS_TOKEN") or (f"{parts.username}:{parts.password}" if parts.password is not None else None)
        netloc = parts.netloc.rsplit("@", 1)[-1]
        return cls(urlunsplit((scheme, netloc, parts.path, urlencode(query, quote_via=quote), "")), collection=collection, token=token)

    @classmethod
    def from_url(cls, url: str, embedder: str | None = None, dim: int | None = None) -> "MilvusIndex":
        """The index a store URL names. Without ``embedder`` the collection must exist and says which embedder
        wrote it; with one (and ``dim``), a new collection is created on first write."""
        probe = cls.bare(url)
        recorded = probe._catalog_row()
        if recorded is None and (embedder is None or dim is None):
            raise IndexNotFoundError(f"no ragkit index in the Milvus collection {probe.collection!r} at {probe.location}: "
                                     f"run `ragkit index PATH --store {probe.location}` (or `ragkit index migrate --to {probe.location}`) first")
        if recorded is not None:
            if embedder is not None and embedder != recorded["embedder"]:
                raise EmbedderMismatchError(f"the Milvus collection {probe.collection!r} holds vectors from {recorded['embedder']}, not {embedder}: "
                                            f"use that embedder (RAGKIT_EMBEDDER={recorded['embedder']}) or another collection (?collection=…)")
            embedder, dim = recorded["embedder"], recorded["dim"]
        probe.embedder, probe.dim = embedder, int(dim)
        return probe

    @property
    def url(self) -> str:
        return self.location

    @property
    def location(self) -> str:
        """The URL to open this index again (never the token: give it as ``MILVUS_TOKEN``)."""
        parts = urlsplit(self.uri)
        query = dict(parse_qsl(parts.query))
        if self.collection != DEFAULT_COLLECTION_NAME:
            query["collection"] = self.collection
        scheme = "milvus+https" if parts.scheme == "https" else "milvus"
        return urlunsplit((scheme, parts.netloc, parts.path, urlencode(query, quote_via=quote), ""))

    # -- connecting ------------------------------------------------------------------------------
    def _client(self):
        """This index's own connection (pymilvus shares one per URI by default, and a shared one that lost its
        server stays broken for every later client in the process)."""
        from pymilvus import MilvusClient

        with self._client_lock:
            if self._own_client is None:
                try:
                    self._own_client = MilvusClient(uri=self.uri, token=self._token or "", timeout=5, **CONNECTION_OPTIONS)
                except Exception as exc:
                    raise StoreUnavailableError(f"cannot reach Milvus at {self.location}: {_reason(exc)}") from None
            return self._own_client

    def open(self) -> "MilvusIndex":
        """Connect, check (or record) which embedder wrote the collection."""
        if self._store is not None:
            return self
        from milvus_haystack import MilvusDocumentStore, MilvusEmbeddingRetriever, MilvusSparseEmbeddingRetriever
        from milvus_haystack.function import BM25BuiltInFunction

        recorded = self._catalog_row()
        if recorded is None:
            self._save_catalog()
            recorded = self._catalog_row()
        if recorded.get("store_format", 1) > STORE_FORMAT:
            raise IndexError_(f"the Milvus collection {self.collection!r} was written by a newer ragkit: upgrade ragkit, or use another collection")
        if recorded["embedder"] != self.embedder or int(recorded["dim"]) != self.dim:
            raise EmbedderMismatchError(
                f"the Milvus collection {self.collection!r} holds {recorded['dim']}-d vectors from {recorded['embedder']}; this index embeds with "
                f"{self.embedder} ({self.dim}-d). Use that embedder, or another collection (?collection=…), or drop this one")
        try:
            store = MilvusDocumentStore(
                collection_name=self.collection, connection_args={"uri": self.uri, "token": self._token or "", **CONNECTION_OPTIONS}, consistency_level="Strong",
                index_params={"index_type": "HNSW", "metric_type": "COSINE", "params": {"M": 16, "efConstruction": 200}},
                search_params={"metric_type": "COSINE", "params": {"ef": EF_SEARCH}},
                text_field=TEXT, sparse_vector_field=SPARSE, builtin_function=[BM25BuiltInFunction(input_field_names=TEXT, output_field_names=SPARSE, enable_match=True)],
                sparse_index_params={"index_type": "SPARSE_INVERTED_INDEX", "metric_type": "BM25", "params": {"bm25_k1": BM25_K1, "bm25_b": BM25_B}},
            )
        except Exception as exc:
            raise StoreUnavailableError(f"cannot use the Milvus collection {self.collection!r} at {self.location}: {_reason(exc)}") from None
        self._store = store
        self._dense = MilvusEmbeddingRetriever(document_store=store)
        self._sparse = MilvusSparseEmbeddingRetriever(document_store=store)
        return self

    def _call(self, what: str, fn, **kwargs):
        """``fn(**kwargs)``; a failure of the server becomes a :class:`StoreUnavailableError` naming the step."""
        try:
            return fn(**kwargs)
        except (FilterError, ValueError, EmbedderMismatchError):
            raise
        except Exception as exc:
            raise StoreUnavailableError(f"{what} failed on Milvus at {self.location}: {_reason(exc)}") from None

    def _exists(self) -> bool:
        """Whether the chunk collection exists yet (asked until it does: one round trip a query before the first write)."""
        if not self._seen_collection:
            self._seen_collection = self._call("looking up the collection", self.open()._store.client.has_collection, collection_name=self.collection)
        return self._seen_collection

    def _query(self, what: str, expr: str, fields: list[str], limit: int | None = None) -> list[dict]:
        kwargs = {"collection_name": self.collection, "filter": expr, "output_fields": fields}
        if limit is not None:
            kwargs["limit"] = limit
        return self._call(what, self.open()._store.client.query, **kwargs) if self._exists() else []

    def _scan(self, fields: list[str]) -> Iterable[dict]:
        """Every row's ``fields``, in pages (Milvus caps one query's rows)."""
        if not self._exists():
            return
        # Milvus Lite has no server timestamp for the iterator, which pymilvus logs as a warning on every scan
        logging.getLogger("pymilvus.client.iterator.query_iterator").setLevel(logging.ERROR)
        iterator = self._call("reading the collection", self._store.client.query_iterator, collection_name=self.collection, batch_size=1000,
                              output_fields=fields)
        try:
            while True:
                page = self._call("reading the collection", iterator.next)
                if not page:
                    return
                yield from page
        finally:
            with contextlib.suppress(Exception):
                iterator.close()

    # -- writing ---------------------------------------------------------------------------------
    def add(self, chunks: Iterable[Document], parents: Iterable[Document] = (), source_hashes: dict[str, str] | None = None,
            average_length: float | None = None, source_chunks: dict[str, int] | None = None) -> int:
        """Write embedded chunks (upserting the same ids: a rerun adds no duplicates). Returns how many.
        Each chunk records its source's checksum and chunk count, so a half-written source is indexed again.
        ``average_length`` is accepted for the store API's sake: Milvus keeps BM25's statistics itself."""
        if list(parents):
            raise ValueError("hierarchical (parent) chunks are not stored on Milvus yet: index with flat chunks")
        chunks = list(chunks)
        if not chunks:
            return 0
        self.open()
        per_source = Counter(d.meta.get("source", "") for d in chunks)
        tokens = self._tokenizer.tokens([d.content or "" for d in chunks])
        rows = []
        for doc, words in zip(chunks, tokens):
            if doc.embedding is None:
                raise ValueError(f"chunk {doc.id} has no embedding; run it through an embedder first")
            if len(doc.embedding) != self.dim:
                raise EmbedderMismatchError(f"chunk {doc.id} has a {len(doc.embedding)}-d embedding; this store holds {self.dim}-d vectors from {self.embedder}")
            vector = np.asarray(doc.embedding, dtype="float32")
            meta = {k: v for k, v in doc.meta.items() if not k.startswith("_")}
            meta.update(collection=doc.meta.get("collection") or DEFAULT_COLLECTION, **{CONTENT: doc.content or ""})
            source = meta.get("source", "")
            if (source_hashes or {}).get(source):
                meta.update(source_sha256=source_hashes[source], source_chunks=(source_chunks or per_source)[source])
            rows.append(Document(id=doc.id, content=" ".join(words), embedding=(vector / (float(np.linalg.norm(vector)) or 1.0)).tolist(), meta=meta))
        return self._call("writing chunks", self._store.write_documents, documents=rows, policy=DuplicatePolicy.OVERWRITE)

    def analyze(self) -> None:
        """Make the writes visible to searches at once (Milvus flushes and indexes them in the background)."""
        if self._exists():
            self._call("flushing", self._store.client.flush, collection_name=self.collection)

    def delete_source(self, source: str) -> int:
        if not self._exists():
            return 0
        expr = f"source == {literal(source)}"
        held = self._count(expr)  # pymilvus's delete no longer says how many rows went
        if held:
            self._call("deleting a source", self._store.client.delete, collection_name=self.collection, filter=expr)
        return held

    def move_sources(self, moves: dict[str, str]) -> int:
        """Put each source of ``moves`` in that collection without re-embedding (its rows are read and upserted)."""
        moved = 0
        for source, name in moves.items():
            check_collection_name(name)
            rows = self._query("reading a source", f"source == {literal(source)}", ["*"])
            changed = [{**row, "collection": name} for row in rows if row.get("collection") != name]
            for row in changed:
                row.pop(SPARSE, None)  # the server's BM25 function writes it
            if changed:
                self._call("moving a source", self._store.client.upsert, collection_name=self.collection, data=changed)
            moved += len(changed)
        return moved

    def count_ids(self, ids: list[str]) -> int:
        return sum(self._count(f"id in {literal(ids[i:i + 1000])}") for i in range(0, len(ids), 1000))

    def _count(self, expr: str = "") -> int:
        rows = self._query("counting chunks", expr, ["count(*)"])
        return int(rows[0]["count(*)"]) if rows else 0

    # -- what the store holds besides chunks -------------------------------------------------------
    # -- reading ---------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._count()

    def __bool__(self) -> bool:
        return bool(self._query("looking for a chunk", "", ["id"], limit=1))

    def _restored(self, doc: Document, score: float | None) -> Document:
        meta = {k: v for k, v in doc.meta.items() if k not in HIDDEN}
        return Document(id=doc.id, content=doc.meta.get(CONTENT, doc.content), meta=meta, score=score)

    def dense_search(self, query_embedding, top_k: int, filters: dict | None = None) -> list[Document]:
        """The ``top_k`` chunks nearest the query (cosine), among those ``filters`` admits."""
        if top_k <= 0:
            return []
        query = self._unit_query(query_embedding)
        self.open()
        found = self._call("dense search", self._dense.run, query_embedding=query, top_k=top_k, filters=self._haystack_filters(filters))["documents"]
        return [self._restored(d, 2.0 * d.score - 1.0 if d.score is not None else None) for d in found]  # back from (cos + 1) / 2

    def sparse_search(self, query: str, top_k: int, filters: dict | None = None) -> list[Document]:
        """The ``top_k`` chunks with the best positive BM25 score among those ``filters`` admits (BM25 on the server)."""
        if top_k <= 0 or not query.strip():
            return []
        words = self._tokenizer.tokens([query])[0]
        if not words:
            return []
        self.open()
        found = self._call("keyword search", self._sparse.run, query_text=" ".join(words), top_k=top_k, filters=self._haystack_filters(filters))["documents"]
        # Milvus Lite reports BM25 as a negative distance (smaller is nearer), Milvus as a positive score: both are |score|
        return [self._restored(d, abs(d.score) / (BM25_K1 + 1.0)) for d in found if d.score]

    def get(self, ids: Iterable[str]) -> list[Document]:
        wanted = list(ids)
        if not wanted or not self._exists():
            return []
        found: dict[str, Document] = {}
        for start in range(0, len(wanted), 1000):
            part = wanted[start:start + 1000]
            for doc in self._call("reading chunks", self._store.filter_documents, filters={"field": "id", "operator": "in", "value": part}):
                found[doc.id] = self._restored(doc, None)
        return [found[i] for i in wanted if i in found]

    def filter_ids(self, filters: dict | None) -> bool | None:
        converted = self._haystack_filters(filters)
        if converted is None:
            return None
        from milvus_haystack.filters import parse_filters

        return bool(self._query("filtering", parse_filters(converted), ["id"], limit=1))

    def meta_fields(self) -> set[str]:
        rows = self._query("reading metadata fields", "", ["*"], limit=2000)
        return {k for row in rows for k in row if k not in HIDDEN | {"id", "vector", SPARSE} and not k.startswith("_")}

    def meta_values(self, field_name: str) -> dict:
        values: Counter = Counter()
        for row in self._scan([field_name]):
            value = row.get(field_name)
            if isinstance(value, (str, int, float, bool)):
                values[value] += 1
        return dict(values)

    @property
    def sources(self) -> dict[str, SourceInfo]:
        """Each source file held: checksum, chunk count, collection (one pass over the rows). A source with fewer
        chunks than it recorded (its writing stopped) has no checksum, so the next run indexes it again."""
        seen: dict[str, list] = {}
        for row in self._scan(["source", "source_sha256", "source_chunks", "collection"]):
            entry = seen.setdefault(row.get("source") or "", [row.get("source_sha256") or "", 0, row.get("collection") or DEFAULT_COLLECTION, row.get("source_chunks")])
            entry[1] += 1
        return {src: SourceInfo(sha256=sha if expected in (None, n) else "", chunks=n, collection=coll) for src, (sha, n, coll, expected) in seen.items()}

    def chunk_ids(self) -> list[str]:
        return sorted(row["id"] for row in self._scan(["id"]))

    def term_weights(self, text: str) -> dict[str, float]:
        """IDF of ``text``'s terms in this store (the local index's ``log((N + 1) / (df + 0.5))``), document
        frequencies counted by the server (``TEXT_MATCH`` on the tokens field)."""
        words = sorted(set(self._tokenizer.tokens([text])[0]))
        if not words:
            return {}
        n = len(self)
        weights = {}
        for word in words:
            df = self._count(f"TEXT_MATCH({TEXT}, {literal(word)})")
            if df:
                weights[word] = float(np.log((n + 1) / (df + 0.5)))
        return weights

    def terms(self, texts: list[str]) -> list[set[str]]:
        return [set(t) for t in self._tokenizer.tokens(texts)]
