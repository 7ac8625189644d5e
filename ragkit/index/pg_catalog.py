"""What a PostgreSQL store holds besides chunks, for :class:`~ragkit.index.pgvector_index.PgvectorIndex`:
which embedder wrote a table, its root folder and collection descriptions, and one writer at a time.

``ragkit_store`` has one row per chunk table: embedder, dimension, ragkit's store format, the folder
source names are relative to (``root``) and the collections' descriptions (``descriptions``, JSON).
A writer (``ragkit index … --store``, ``migrate``) holds a PostgreSQL advisory lock on the table's
name for the whole run (:meth:`PostgresCatalogMixin.write_lock`), so two indexers on one store
queue — on any machine that reaches the server — as they queue on a local index's file lock.

Hand-written because pgvector-haystack's document store keeps documents only; these few rows are
what turns a table of chunks into a ragkit index (what ``manifest.json`` is to a local folder).
"""

from __future__ import annotations

import contextlib
import time
from ragkit.index.filters import check_collection_name
from ragkit.index.servers import redacted
from ragkit.index.versions import EmbedderMismatchError, IndexError_, IndexLockedError, IndexNotFoundError

STORE_FORMAT = 1
DEFAULT_LOCK_TIMEOUT_S = 600.0

CATALOG_DDL = (
    "CREATE TABLE IF NOT EXISTS ragkit_store (table_name text PRIMARY KEY, embedder text NOT NULL, "
    "dim integer NOT NULL, store_format integer NOT NULL)",
    "ALTER TABLE ragkit_store ADD COLUMN IF NOT EXISTS root text",
    "ALTER TABLE ragkit_store ADD COLUMN IF NOT EXISTS descriptions jsonb NOT NULL DEFAULT '{}'",
)


def recorded_owner(connect, table: str) -> tuple[str, int] | None:
    """(embedder, dimension) recorded for ``table``, or None when ragkit never wrote it."""
    with connect() as conn:
        exists = conn.execute("SELECT to_regclass('ragkit_store') IS NOT NULL").fetchone()[0]
        row = conn.execute("SELECT embedder, dim FROM ragkit_store WHERE table_name = %s", (table,)).fetchone() if exists else None
    return (row[0], int(row[1])) if row else None


class PostgresCatalogMixin:
    """``ragkit_store`` bookkeeping (needs ``table``, ``url``, ``embedder``, ``dim``, ``_connect``, ``_reader``, ``open``)."""

    def _check_owner(self) -> None:
        with self._connect() as conn:
            for statement in CATALOG_DDL:
                conn.execute(statement)
            conn.execute("INSERT INTO ragkit_store (table_name, embedder, dim, store_format) VALUES (%s, %s, %s, %s) "
                         "ON CONFLICT (table_name) DO NOTHING", (self.table, self.embedder, self.dim, STORE_FORMAT))
            embedder, dim, store_format = conn.execute("SELECT embedder, dim, store_format FROM ragkit_store WHERE table_name = %s", (self.table,)).fetchone()
            self._create_postings(conn)
        if store_format > STORE_FORMAT:
            raise IndexError_(f"the table {self.table!r} was written by a newer ragkit (store format {store_format}, this one reads {STORE_FORMAT}): "
                              "upgrade ragkit, or index into another table")
        if embedder != self.embedder or dim != self.dim:
            raise EmbedderMismatchError(
                f"the table {self.table!r} holds {dim}-d vectors from {embedder}; this index embeds with {self.embedder} ({self.dim}-d). "
                f"Use that embedder, or index into another table (?table=…), or drop this one"
            )

    def _catalog(self, column: str):
        self.open()
        with self._reader() as conn:
            return conn.execute(f"SELECT {column} FROM ragkit_store WHERE table_name = %s", (self.table,)).fetchone()[0]

    # -- the folder names are relative to, and collection descriptions ------------------------------
    @property
    def root(self) -> str | None:
        return self._catalog("root")

    def set_root(self, root: str) -> None:
        self.open()
        with self._connect() as conn:
            conn.execute("UPDATE ragkit_store SET root = %s WHERE table_name = %s", (root, self.table))

    @property
    def collections(self) -> dict[str, str]:
        """Each collection the store holds chunks in -> its description ("" when none was given)."""
        described = self._catalog("descriptions") or {}
        return {name: described.get(name, "") for name in sorted(self.collection_counts())}

    def set_description(self, name: str, description: str) -> None:
        self.open()
        with self._connect() as conn:
            conn.execute("UPDATE ragkit_store SET descriptions = descriptions || jsonb_build_object(%s::text, %s::text) WHERE table_name = %s",
                         (name, description, self.table))

    def prune_collections(self) -> list[str]:
        """Drop the descriptions of collections that no longer hold a chunk; returns their names."""
        held = self.collection_counts()
        gone = [name for name in (self._catalog("descriptions") or {}) if name not in held]
        if gone:
            with self._connect() as conn:
                conn.execute("UPDATE ragkit_store SET descriptions = descriptions - %s::text[] WHERE table_name = %s", (gone, self.table))
        return gone

    def move_sources(self, moves: dict[str, str]) -> int:
        """Put each source of ``moves`` (source -> collection) in that collection without re-embedding."""
        self.open()
        moved = 0
        with self._connect() as conn, conn.transaction():
            for source, name in moves.items():
                check_collection_name(name)
                moved += conn.execute(
                    f"UPDATE \"{self.table}\" SET meta = jsonb_set(meta, '{{collection}}', to_jsonb(%s::text)) "
                    "WHERE meta->>'source' = %s AND meta->>'collection' IS DISTINCT FROM %s", (name, source, name)).rowcount
        return moved

    def meta_values(self, field_name: str) -> dict:
        """Each scalar value the chunks hold in ``meta[field_name]`` -> how many chunks hold it."""
        self.open()
        with self._reader() as conn:
            rows = conn.execute(f"SELECT meta->%s, count(*) FROM \"{self.table}\" WHERE jsonb_typeof(meta->%s) IN ('string', 'number', 'boolean') "
                                "GROUP BY 1", (field_name, field_name)).fetchall()
        return {value: n for value, n in rows}

    def chunk_ids(self) -> list[str]:
        with self._reader() as conn:
            return [r[0] for r in conn.execute(f'SELECT id FROM "{self.table}" ORDER BY id').fetchall()]

    # -- one writer at a time ---------------------------------------------------------------------
    @contextlib.contextmanager
    def write_lock(self, timeout: float | None = None):
        """Hold the table's advisory lock (``pg_try_advisory_lock``) while writing; another writer waits up to
        ``timeout`` seconds (default :data:`DEFAULT_LOCK_TIMEOUT_S`), then :class:`IndexLockedError`. The lock
        goes with the connection, so a writer that dies releases it."""
        timeout = DEFAULT_LOCK_TIMEOUT_S if timeout is None else timeout
        key = f"ragkit:{self.table}"
        with self._connect() as conn:
            deadline = time.monotonic() + timeout
            while not conn.execute("SELECT pg_try_advisory_lock(hashtext(%s))", (key,)).fetchone()[0]:
                if time.monotonic() >= deadline:
                    raise IndexLockedError(f"another ragkit run is writing the table {self.table!r} at {redacted(self.url)}; "
                                           f"waited {timeout:.0f} s (--lock-timeout to wait longer)")
                time.sleep(0.2)
            try:
                yield self
            finally:
                with contextlib.suppress(Exception):
                    conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (key,))


def missing_table_error(location: str, table: str) -> IndexNotFoundError:
    """``location``: the store's URL without its password (and with its ``?table=``)."""
    return IndexNotFoundError(f"no ragkit index in the table {table!r} at {location}: "
                              f"run `ragkit index PATH --store {location}` (or `ragkit index migrate --to {location}`) first")

