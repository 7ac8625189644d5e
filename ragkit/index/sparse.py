"""A persistent BM25 index on bm25s, with stemming and stopwords, saved without pickle.

bm25s does the scoring (eager sparse matrices, so a query is a few column sums). What it does not
do is map its row numbers back to ragkit's chunk ids or add documents to an existing index; this
module does both: rows are kept in a parallel list of chunk ids, and an index that changed is
rebuilt lazily on the next search (bm25s indexes ~50k short chunks per second on one core).
Arrays are written with ``np.save(allow_pickle=False)`` by bm25s itself.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

import bm25s
import Stemmer

SPARSE_FORMAT_VERSION = 1


class BM25sIndex:
    """Chunk ids → BM25 scores.

    Usage::

        index = BM25sIndex()
        index.build(["id1", "id2"], ["The Rhine flows north.", "Tesla was born in Smiljan."])
        index.search("where was tesla born", top_k=1)   # [("id2", 1.38)]
    """

    def __init__(self, language: str = "english", stopwords: str | None = "en", k1: float = 1.5, b: float = 0.75):
        self.language = language
        self.stopwords = stopwords
        self.k1 = k1
        self.b = b
        self._stemmer = Stemmer.Stemmer(language) if language else None
        self._ids: list[str] = []
        self._model: bm25s.BM25 | None = None
        self._df: np.ndarray | None = None  # documents per term, read off the model when first asked

    def __len__(self) -> int:
        return len(self._ids)

    def _tokenize(self, texts: list[str]) -> list[list[str]]:
        return bm25s.tokenize(
            texts,
            stopwords=self.stopwords,
            stemmer=self._stemmer,
            return_ids=False,
            show_progress=False,
        )

    def build(self, ids: list[str], texts: list[str]) -> None:
        if len(ids) != len(texts):
            raise ValueError("ids and texts must have the same length")
        self._ids = list(ids)
        if not ids:
            self._model, self._df = None, None
            return
        model = bm25s.BM25(k1=self.k1, b=self.b)
        model.index(self._tokenize(texts), show_progress=False)
        self._model, self._df = model, None

    def mask(self, ids) -> np.ndarray:
        """A bm25s ``weight_mask`` that admits the rows of the chunk ids ``ids`` (for :meth:`search`)."""
        wanted = ids if isinstance(ids, (set, frozenset)) else set(ids)
        return np.fromiter((i in wanted for i in self._ids), dtype="float32", count=len(self._ids))

    def search(self, query: str, top_k: int, mask: np.ndarray | None = None) -> list[tuple[str, float]]:
        """The ``top_k`` best chunks for ``query`` with a positive BM25 score, best first; with
        ``mask`` (:meth:`mask`) only among the rows it admits (bm25s zeroes the others' scores
        before choosing the top k, so the result is the true top k of the admitted rows)."""
        if self._model is None or not self._ids or top_k <= 0:
            return []
        tokens = self._tokenize([query])
        # Words the corpus never saw carry no BM25 weight; an all-unknown query scores nothing.
        vocab = self._model.vocab_dict
        tokens = [[t for t in tokens[0] if t in vocab]]
        if not tokens[0]:
            return []
        k = min(top_k, len(self._ids))
        if mask is None:
            rows, scores = self._model.retrieve(tokens, k=k, show_progress=False, n_threads=0)  # 0: no thread pool per query
        else:
            rows, scores = self._model.retrieve(tokens, k=k, show_progress=False, n_threads=0, weight_mask=mask)
        return [(self._ids[int(r)], float(s)) for r, s in zip(rows[0], scores[0]) if s > 0]

    def term_weights(self, text: str) -> dict[str, float]:
        """The inverse document frequency of each of ``text``'s terms (stemmed, stopwords dropped) that
        the index knows: ``log((N + 1) / (df + 0.5))``, read from bm25s's term columns. Terms the
        corpus never saw are left out (they can match nothing)."""
        if self._model is None or not self._ids:
            return {}
        vocab = self._model.vocab_dict
        if self._df is None:
            self._df = np.diff(np.asarray(self._model.scores["indptr"]))
        n = len(self._ids)
        return {t: math.log((n + 1) / (int(self._df[vocab[t]]) + 0.5)) for t in self._tokenize([text])[0] if t in vocab and t}

    def tokens(self, texts: list[str]) -> list[list[str]]:
        """Each text's tokens as this index counts them (stemmed, stopwords dropped, repeats kept):
        what a server store writes its BM25 postings from, so both score the same terms."""
        return self._tokenize(texts) if texts else []

    def terms(self, texts: list[str]) -> list[set[str]]:
        """Each text's terms as this index tokenizes them."""
        return [set(tokens) for tokens in self._tokenize(texts)] if texts else []

    # -- persistence -------------------------------------------------------------------------
    def save(self, folder: str | Path) -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        meta = {
            "format_version": SPARSE_FORMAT_VERSION,
            "language": self.language,
            "stopwords": self.stopwords,
            "k1": self.k1,
            "b": self.b,
            "ids": self._ids,
        }
        (folder / "sparse.json").write_text(json.dumps(meta), encoding="utf-8")
        if self._model is not None:
            self._model.save(str(folder / "bm25s"), allow_pickle=False)

    @classmethod
    def load(cls, folder: str | Path) -> "BM25sIndex":
        folder = Path(folder)
        meta = json.loads((folder / "sparse.json").read_text(encoding="utf-8"))
        if meta.get("format_version") != SPARSE_FORMAT_VERSION:
            raise ValueError(f"sparse index format {meta.get('format_version')} is not {SPARSE_FORMAT_VERSION}")
        index = cls(language=meta["language"], stopwords=meta["stopwords"], k1=meta["k1"], b=meta["b"])
        index._ids = list(meta["ids"])
        if index._ids:
            index._model = bm25s.BM25.load(str(folder / "bm25s"), allow_pickle=False, load_corpus=False)
            rows = int(index._model.scores.get("num_docs", -1))
            if rows != len(index._ids):
                raise ValueError(f"sparse index holds {rows} rows but lists {len(index._ids)} chunk ids")
        return index
