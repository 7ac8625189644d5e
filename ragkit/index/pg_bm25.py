"""BM25 on PostgreSQL for :class:`~ragkit.index.pgvector_index.PgvectorIndex`: postings beside the chunks,
scored as the local bm25s index scores them.

PostgreSQL's full text (Haystack's ``PgvectorKeywordRetriever``, ``sparse="fulltext"``) ANDs every word of the query
(``plainto_tsquery``) and ranks without document frequencies (``ts_rank_cd``): on 500 SQuAD dev
questions 72 % found nothing and hybrid MRR@10 fell from 0.862 to 0.773
(``bench/results/store_parity.json``). So ragkit keeps BM25 postings beside the chunks — one row
per (term, chunk) with the term's tf part, tokenised exactly as the local bm25s index does, and
document frequencies per term — and scores a query with one indexed ``GROUP BY``: bm25s's
``lucene`` formula, so both stores rank the same chunks. The lengths' average is the one when the
chunk was written (a corpus that grows a lot drifts slightly; re-index to refresh).

Hand-written because no Haystack pgvector component scores BM25 and PostgreSQL has no BM25 of its own.

Tables, per chunk table ``T``: ``T_postings`` (term id, chunk id, the term's tf part
``tf / (tf + k1 (1 - b + b·len/avg))``; indexed by term, covering), ``T_terms`` (term id → document
frequency) and ``T_lengths`` (chunk id → tokens). A query's score is ``Σ idf(t) · weight`` over its
terms, idf being bm25s's ``lucene`` ``ln(1 + (N - df + 0.5) / (df + 0.5))``. Writers update postings
and document frequencies in one transaction, taking turns on ``T_terms``.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from dataclasses import replace

from haystack import Document

from ragkit.index.filters import FilterError, is_haystack_filter, normalize_filters
from ragkit.index.servers import redacted
from ragkit.index.versions import StoreUnavailableError

BM25_K1, BM25_B = 1.5, 0.75  # bm25s's defaults, as the local index uses them


def term_id(token: str) -> int:
    """A stable signed 64-bit id for a token (no vocabulary table to keep in step between writers)."""
    return int.from_bytes(hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest(), "big", signed=True)



POSTINGS_DDL = (
    "CREATE TABLE IF NOT EXISTS {t}_postings (term bigint NOT NULL, chunk_id text NOT NULL, weight real NOT NULL)",
    "CREATE INDEX IF NOT EXISTS {t}_postings_term ON {t}_postings (term) INCLUDE (chunk_id, weight)",
    "CREATE INDEX IF NOT EXISTS {t}_postings_chunk ON {t}_postings (chunk_id)",
    "CREATE TABLE IF NOT EXISTS {t}_terms (term bigint PRIMARY KEY, df integer NOT NULL)",
    "CREATE TABLE IF NOT EXISTS {t}_lengths (chunk_id text PRIMARY KEY, length integer NOT NULL)",
)


class PostgresBM25Mixin:
    """The BM25 side of a PostgreSQL chunk table (needs ``table``, ``url``, ``_tokenizer``, ``_connect``,
    ``_reader`` and ``get`` from the class it is mixed into)."""

    def _create_postings(self, conn) -> None:
        for statement in POSTINGS_DDL:
            conn.execute(statement.format(t=self.table))

    def _bm25_search(self, query: str, top_k: int, filters: dict | None) -> list[Document]:
        where, params = self._sql_filter(filters)
        try:
            weights = self._idf(self._tokenizer.tokens([query])[0])
        except Exception as exc:
            raise StoreUnavailableError(f"keyword search failed on {redacted(self.url)}: {str(exc).strip().splitlines()[0]}") from None
        if not weights:
            return []
        sql = (f"SELECT p.chunk_id, sum(p.weight * q.idf) AS score FROM {self.table}_postings p "
               "JOIN unnest(%s::bigint[], %s::float8[]) AS q(term, idf) ON p.term = q.term "
               + (f"JOIN {self.table} c ON c.id = p.chunk_id WHERE {where} " if where else "")
               + "GROUP BY p.chunk_id ORDER BY score DESC, p.chunk_id LIMIT %s")
        try:
            with self._reader() as conn:
                rows = conn.execute(sql, (list(weights), list(weights.values()), *params, top_k)).fetchall()
        except Exception as exc:
            raise StoreUnavailableError(f"keyword search failed on {redacted(self.url)}: {str(exc).strip().splitlines()[0]}") from None
        scores = {chunk_id: float(score) for chunk_id, score in rows if score > 0}
        return [replace(d, score=scores[d.id]) for d in self.get(list(scores))]

    def _write_postings(self, chunks: list[Document], average_length: float | None = None) -> None:
        """BM25 postings of ``chunks`` (replacing any they had), in one transaction with the term
        frequencies: a crash leaves the old postings or the new ones, never half."""
        tokens = self._tokenizer.tokens([d.content or "" for d in chunks])
        ids = [d.id for d in chunks]
        with self._connect() as conn, conn.transaction():
            conn.execute(f"LOCK TABLE {self.table}_terms IN SHARE ROW EXCLUSIVE MODE")  # writers take turns on df
            self._drop_postings(conn, ids)
            held_n, held_len = conn.execute(f"SELECT count(*), coalesce(sum(length), 0) FROM {self.table}_lengths").fetchone()
            lengths = [len(t) for t in tokens]
            avg = average_length or (held_len + sum(lengths)) / max(held_n + len(ids), 1) or 1.0
            postings, df = [], Counter()
            for chunk_id, words, length in zip(ids, tokens, lengths):
                norm = BM25_K1 * (1 - BM25_B + BM25_B * length / avg)
                for word, tf in Counter(words).items():
                    term = term_id(word)
                    postings.append((term, chunk_id, tf / (tf + norm)))
                    df[term] += 1
            with conn.cursor() as cur:
                with cur.copy(f"COPY {self.table}_postings (term, chunk_id, weight) FROM STDIN") as copy:
                    for row in postings:
                        copy.write_row(row)
                cur.executemany(f"INSERT INTO {self.table}_lengths VALUES (%s, %s)", list(zip(ids, lengths)))
                cur.executemany(f"INSERT INTO {self.table}_terms VALUES (%s, %s) ON CONFLICT (term) DO UPDATE SET df = {self.table}_terms.df + EXCLUDED.df",
                                list(df.items()))

    def _drop_postings(self, conn, ids: list[str]) -> None:
        gone = conn.execute(f"DELETE FROM {self.table}_postings WHERE chunk_id = ANY(%s) RETURNING term", (ids,)).fetchall()
        counts = Counter(term for (term,) in gone)
        if counts:
            conn.cursor().executemany(f"UPDATE {self.table}_terms SET df = df - %s WHERE term = %s", [(n, t) for t, n in counts.items()])
        conn.execute(f"DELETE FROM {self.table}_lengths WHERE chunk_id = ANY(%s)", (ids,))

    def _idf(self, tokens: list[str]) -> dict[int, float]:
        """term id → bm25s's lucene IDF, ``ln(1 + (N - df + 0.5) / (df + 0.5))``, for the query's known terms
        (a repeated word counts each time, as bm25s sums it)."""
        counts = Counter(term_id(t) for t in tokens)
        if not counts:
            return {}
        with self._reader() as conn:
            n = conn.execute(f"SELECT count(*) FROM {self.table}_lengths").fetchone()[0]
            df = dict(conn.execute(f"SELECT term, df FROM {self.table}_terms WHERE term = ANY(%s) AND df > 0", (list(counts),)).fetchall())
        return {t: c * math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5)) for t, c in counts.items() if t in df}

    def _sql_filter(self, filters: dict | None) -> tuple[str, list]:
        """ragkit's filter form as SQL on the chunk table's ``meta`` (AND across keys, any of a key's values)."""
        normalized = normalize_filters(filters)
        if not normalized:
            return "", []
        if is_haystack_filter(normalized):
            raise FilterError("BM25 search on PostgreSQL takes ragkit's filter form ({field: [values]}), not Haystack's operator form")
        clauses, params = [], []
        for key, values in normalized.items():
            values = values if isinstance(values, list) else [values]
            clauses.append("c.meta->>%s = ANY(%s)")
            params += [key, [json.dumps(v) if isinstance(v, bool) else str(v) for v in values]]
        return " AND ".join(clauses), params

    def term_weights(self, text: str) -> dict[str, float]:
        """IDF of ``text``'s terms in this store (the local index's ``term_weights``: ``log((N + 1) / (df + 0.5))``)."""
        tokens = self._tokenizer.tokens([text])[0]
        if not tokens:
            return {}
        self.open()
        ids = {t: term_id(t) for t in tokens}
        with self._reader() as conn:
            n = conn.execute(f"SELECT count(*) FROM {self.table}_lengths").fetchone()[0]
            df = dict(conn.execute(f"SELECT term, df FROM {self.table}_terms WHERE term = ANY(%s) AND df > 0", (list(ids.values()),)).fetchall())
        return {t: math.log((n + 1) / (df[i] + 0.5)) for t, i in ids.items() if i in df}

    def terms(self, texts: list[str]) -> list[set[str]]:
        return [set(t) for t in self._tokenizer.tokens(texts)]

