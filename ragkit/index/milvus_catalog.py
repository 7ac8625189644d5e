"""What a Milvus store holds besides chunks, for :class:`~ragkit.index.milvus_index.MilvusIndex`: one row
of the ``ragkit_store`` collection per chunk collection (which embedder wrote it, its dimension, ragkit's
store format, the root folder source names are relative to, the collections' descriptions), and a
writers' lock.

Hand-written because milvus-haystack's document store keeps documents only; this row is what turns a
collection of chunks into a ragkit index (what ``manifest.json`` is to a local folder). Milvus has no
lock a client can take, so writers on one machine queue on a file lock named after the URL and
collection (:meth:`MilvusCatalogMixin.write_lock`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json

from ragkit.index.versions import IndexLockedError, StoreUnavailableError

STORE_FORMAT = 1
CATALOG = "ragkit_store"


class MilvusCatalogMixin:
    """``ragkit_store`` bookkeeping (needs ``uri``, ``collection``, ``embedder``, ``dim``, ``location``, ``_client``,
    ``_catalog_loaded`` and ``collection_counts`` from the class it is mixed into)."""

    def _catalog_row(self) -> dict | None:
        client = self._client()
        try:
            if not client.has_collection(CATALOG):
                return None
            if not self._catalog_loaded:  # a restarted server holds collections released until loaded
                client.load_collection(CATALOG)
                self._catalog_loaded = True
            rows = client.query(CATALOG, filter=f"name == {literal(self.collection)}", output_fields=["info"])
        except Exception as exc:
            raise StoreUnavailableError(f"cannot read Milvus at {self.location}: {_reason(exc)}") from None
        return json.loads(rows[0]["info"]) if rows else None

    def _save_catalog(self, **changes) -> None:
        from pymilvus import DataType

        client = self._client()
        if not client.has_collection(CATALOG):
            schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
            schema.add_field("name", DataType.VARCHAR, is_primary=True, max_length=256)
            schema.add_field("info", DataType.VARCHAR, max_length=65_535)
            schema.add_field("unused", DataType.FLOAT_VECTOR, dim=2)  # Milvus wants a vector field in every collection
            client.create_collection(CATALOG, schema=schema, consistency_level="Strong")
            params = client.prepare_index_params()
            params.add_index(field_name="unused", index_type="FLAT", metric_type="L2")
            client.create_index(CATALOG, params)
            client.load_collection(CATALOG)
        info = self._catalog_row() or {"embedder": self.embedder, "dim": self.dim, "store_format": STORE_FORMAT, "root": None, "descriptions": {}}
        info.update(changes)
        client.upsert(CATALOG, [{"name": self.collection, "info": json.dumps(info), "unused": [0.0, 0.0]}])

    @property
    def root(self) -> str | None:
        return (self._catalog_row() or {}).get("root")

    def set_root(self, root: str) -> None:
        self._save_catalog(root=root)

    @property
    def collections(self) -> dict[str, str]:
        described = (self._catalog_row() or {}).get("descriptions", {})
        return {name: described.get(name, "") for name in sorted(self.collection_counts())}

    def set_description(self, name: str, description: str) -> None:
        described = (self._catalog_row() or {}).get("descriptions", {})
        self._save_catalog(descriptions={**described, name: description})

    def prune_collections(self) -> list[str]:
        described = (self._catalog_row() or {}).get("descriptions", {})
        held = self.collection_counts()
        gone = [name for name in described if name not in held]
        if gone:
            self._save_catalog(descriptions={k: v for k, v in described.items() if k in held})
        return gone

    @contextlib.contextmanager
    def write_lock(self, timeout: float | None = None):
        """A file lock named after the URL and collection (see the module docstring for its reach)."""
        from filelock import FileLock, Timeout

        from ragkit.index.versions import DEFAULT_LOCK_TIMEOUT_S
        from ragkit.llm.models import cache_dir

        folder = cache_dir() / "locks"
        folder.mkdir(parents=True, exist_ok=True)
        name = hashlib.sha256(f"{self.uri}|{self.collection}".encode()).hexdigest()[:24]
        lock = FileLock(str(folder / f"milvus-{name}.lock"))
        timeout = DEFAULT_LOCK_TIMEOUT_S if timeout is None else timeout
        try:
            lock.acquire(timeout=timeout)
        except Timeout:
            raise IndexLockedError(f"another ragkit run on this machine is writing the Milvus collection {self.collection!r}; "
                                   f"waited {timeout:.0f} s (--lock-timeout to wait longer)") from None
        try:
            yield self
        finally:
            lock.release()


def literal(value) -> str:
    """A string (or list of strings) as a Milvus expression literal: JSON's quoting and escapes, with
    non-ASCII characters as themselves (Milvus's parser has no ``\\u`` escape)."""
    return json.dumps(value, ensure_ascii=False)


def _reason(exc: BaseException) -> str:
    text = " ".join(str(getattr(exc, "message", None) or exc).split())
    return text or type(exc).__name__
