"""HybridScoreJoiner: fuse a dense and a sparse candidate list by their scores, each scaled by its
list's best score.

Every score is divided by the best score in its own list, so the top document of each list gets
1.0 and the others the share of the best they reach; a document's fused score is
``(1 - sparse_weight) * dense + sparse_weight * sparse`` (1.0: first in both lists). A document
that only one list returned gets, in the other list, that list's lowest score (it ranked below the
cut there, so at most that) — or 0 when that list is shorter than the other one, because a list
that stops early has run out of matches (BM25 returns only documents that share a word with the
question, and their score would be 0).

Why scores and why this scaling. Cosine similarity and BM25 both have a natural zero (orthogonal;
no shared term), so "share of the list's best" needs no range estimated from the data, no
constant, and keeps how far apart a list's candidates are. That spread is what lets the fusion
follow whichever retriever is sure of itself *for this question*: BM25's scores fall off steeply
below a clear lexical match, while a dense list that cannot tell its candidates apart (a weak or
off-domain embedder) gives them all nearly the same share and so changes little. Reciprocal rank
fusion throws the scores away and gives a fixed weight to each rank whatever the lists look like,
which is why it demoted BM25's correct first hit on domains where the embedder is weaker
(bench/fusion.py measures both, also with a deliberately degraded dense retriever).

What is Haystack's and what is not. Haystack's ``DocumentJoiner`` has no mode that does this
fusion: ``reciprocal_rank_fusion`` discards scores, ``distribution_based_rank_fusion`` rescales by
mean ± 3 standard deviations and then keeps each document's *highest* list score instead of adding
them, and ``merge`` adds raw scores (BM25's 5-30 would swamp cosine's 0-1) and counts a missing
document as 0. The scaling and the missing-document scores therefore have to be done here; the
weighted sum that would be left for ``merge`` is one line, and going through it costs ~0.65 ms a
question (every candidate rebuilt as a ``Document`` twice more, three times the whole fusion done
here), so the sum and the sort are written out too and only the ``top_k`` kept documents are copied.
The component itself is a plain Haystack component (sockets, ``to_dict``/``from_dict``).

The two lists arrive on named sockets rather than a variadic one: a variadic socket receives its
lists in the order their senders ran, and in the hybrid pipeline BM25 (which waits for no
embedding) runs first, so weights given as ``[dense, sparse]`` went to the wrong lists — the RRF
pipeline that ``build_hybrid_pipeline`` used to build weighted dense 0.8, not BM25.

Both lists must come from the same candidate depth (the same ``top_k`` asked of each retriever):
a shorter list is read as exhausted.

Usage::

    from ragkit.components.score_fusion import HybridScoreJoiner
    joiner = HybridScoreJoiner(sparse_weight=0.5, top_k=5)
    joiner.run(dense_documents=faiss_docs, sparse_documents=bm25_docs)["documents"]

In a pipeline, connect ``dense.documents`` to ``joiner.dense_documents`` and ``sparse.documents``
to ``joiner.sparse_documents`` (see :func:`ragkit.index.retrieval.build_hybrid_pipeline`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional

from haystack import Document, component, default_from_dict, default_to_dict

DEFAULT_SPARSE_WEIGHT = 0.5  # equal weights: chosen a priori; bench/fusion.py shows the curve on new_wiki and dev


def scaled_scores(documents: list[Document]) -> dict[str, float]:
    """Each document's score divided by the list's best (first occurrence of an id wins).

    A list whose best score is not positive (a cosine list where nothing points the question's
    way) is shifted instead, so its best gets 1.0 and the order is kept. Missing scores count as 0."""
    raw: dict[str, float] = {}
    for doc in documents:
        if doc.id not in raw:
            raw[doc.id] = float(doc.score) if doc.score is not None else 0.0
    if not raw:
        return {}
    best = max(raw.values())
    if best > 0:
        return {i: s / best for i, s in raw.items()}
    return {i: 1.0 + (s - best) for i, s in raw.items()}


def fill_score(scaled: dict[str, float], this_len: int, other_len: int) -> float:
    """The score a document missing from this list gets in it: 0 when the list is shorter than the
    other one (it ran out of matches) or empty, otherwise its lowest scaled score."""
    if not scaled or this_len < other_len:
        return 0.0
    return min(scaled.values())


@component
class HybridScoreJoiner:
    def __init__(self, sparse_weight: float = DEFAULT_SPARSE_WEIGHT, top_k: Optional[int] = None):
        if not 0.0 < sparse_weight < 1.0:
            raise ValueError("sparse_weight must be between 0 and 1 (exclusive)")
        if top_k is not None and top_k < 1:
            raise ValueError("top_k must be at least 1")
        self.sparse_weight = sparse_weight
        self.top_k = top_k

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, sparse_weight=self.sparse_weight, top_k=self.top_k)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "HybridScoreJoiner":
        return default_from_dict(cls, data)

    @component.output_types(documents=list[Document])
    def run(self, dense_documents: list[Document], sparse_documents: list[Document], top_k: Optional[int] = None) -> dict[str, list[Document]]:
        """Fused documents, best first; ``top_k`` (or the constructor's) cuts the list."""
        top_k = top_k or self.top_k
        dense, sparse = scaled_scores(dense_documents), scaled_scores(sparse_documents)
        if not dense and not sparse:
            return {"documents": []}
        by_id: dict[str, Document] = {}
        for doc in [*dense_documents, *sparse_documents]:
            by_id.setdefault(doc.id, doc)
        n_dense, n_sparse = len(dense), len(sparse)
        dense_fill = fill_score(dense, n_dense, n_sparse)
        sparse_fill = fill_score(sparse, n_sparse, n_dense)
        w = self.sparse_weight
        fused = {i: (1.0 - w) * dense.get(i, dense_fill) + w * sparse.get(i, sparse_fill) for i in by_id}
        order = sorted(by_id, key=fused.__getitem__, reverse=True)  # stable: ties keep dense-first order
        if top_k:
            order = order[:top_k]
        return {"documents": [replace(by_id[i], score=fused[i]) for i in order]}
