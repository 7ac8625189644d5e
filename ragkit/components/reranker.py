"""Reranker: reorder retrieved chunks with a stronger (slower) relevance model.

Backends:

* ``"cross-encoder"`` — any sentence-transformers ``CrossEncoder`` (hub id or local folder), run by
  ``SentenceTransformersSimilarityRanker`` from sentence-transformers-haystack. None is installable
  offline here; users who have one pass its path.
* ``"llm"`` — pointwise P(yes | question, chunk) from the LLM. With llama.cpp the question is
  the shared prompt prefix and only each chunk's tail is evaluated; the probability comes from the
  next-token distribution (:class:`~ragkit.llm.probe.LlamaProbe`), no text is generated. With an
  OpenAI-compatible server, from its top log-probabilities of a one-token reply
  (:func:`ragkit.llm.judgments.server_choice_probs`; llama-server reuses the question's prefix too).
* ``"bi-encoder"`` — a sentence-transformers embedder (``model``, default the embedded
  all-MiniLM-L6-v2) scoring each chunk by its *best sentence*'s cosine to the question. Whole-chunk
  cosine from the same model the index uses only repeats the dense retriever (alone it lowered R@1
  from 0.780 to 0.687 on SQuAD); the best sentence is a different signal (a factoid answer sits in
  one sentence; the chunk vector averages it away). Sentence vectors come from a
  content-addressed :class:`~ragkit.index.sentence_vectors.SentenceVectorCache`, which ``AgenticRAG``
  fills for the whole index once (and keeps next to it), so at question time only the question
  is embedded.

``fuse_with_retrieval`` (default: on for the bi-encoder and LLM backends, off for a cross-encoder)
combines the reranker's order with the retrieval order by reciprocal rank fusion (k=60) instead
of replacing it: the offline rerankers are weaker than hybrid BM25+dense retrieval on their own,
but fused they add to it: best sentence + fusion took R@3 0.927 → 0.940 and R@5 0.947 → 0.973 on 150
SQuAD dev questions with 15 hybrid candidates, at ~0.8 s per question on 2 cores; the 0.5B LLM
pointwise reranker was far worse and took ~30 s (``python bench/rerank_squad.py --questions 150
--llm-questions 8`` → bench/results/rerank_squad.json). On thousands of people's questions as the pipeline runs
them (10 candidates, top 5; ``python bench/rerank_questions.py``) that 1:1 fusion lowers MRR@5 by 0.01–0.03 and R@1
by 2–5 points against hybrid retrieval alone; ``retrieval_weight=2`` (the retrieval order counted twice, so the best
sentence breaks near-ties instead of outvoting it; chosen on SQuAD dev questions outside the 300 paragraphs the
agreement runs sample) keeps MRR@5 within 0.005 and adds 0.4–1.3 points of R@5. The default stays 1 until the
figures measured with it are measured again (docs/agentic_features.md).

Scores land in ``Document.score`` (the retrieval score is kept in ``meta["retrieval_score"]``).
If the LLM gives no probabilities (a server that sends no log-probabilities), or scoring fails, the input
order is kept and the output says why (``reranking["fallback"]``).

Usage::

    reranker = Reranker(backend="cross-encoder", model="/models/ms-marco-MiniLM-L-6-v2", top_k=5)
    reranker.warm_up()
    reranker.run(query="Where was Tesla born?", documents=docs)["documents"]
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal

import numpy as np
from haystack import Document, component, default_from_dict, default_to_dict
from haystack.dataclasses import ChatMessage

from ragkit.index.sentence_vectors import SentenceVectorCache
from ragkit.index.sentences import split_sentences
from ragkit.llm.judgments import server_choice_probs
from ragkit.llm.probe import LlamaProbe, probe_for
from ragkit.llm.structured import backend_of, generator_from_dict, generator_to_dict
from ragkit.pipeline.trace import record

RerankBackend = Literal["cross-encoder", "llm", "bi-encoder"]
RERANK_SYSTEM = "You judge whether a passage helps answer a question. Reply yes or no."
RERANK_WORDS = {"yes": ["yes", "Yes"], "no": ["no", "No"]}
RRF_K = 60


def fused_order(scores: list[float], retrieval_weight: float = 1.0) -> list[int]:
    """Indices by reciprocal rank fusion of the input order (retrieval), weighted ``retrieval_weight``, and the
    order of ``scores``; ties go to the better reranker rank."""
    order = sorted(range(len(scores)), key=lambda i: scores[i], reverse=True)
    rank = {i: r for r, i in enumerate(order)}
    return sorted(range(len(scores)), key=lambda i: (-(retrieval_weight / (RRF_K + i) + 1 / (RRF_K + rank[i])), rank[i]))


def split_passage(text: str, min_chars: int = 12) -> list[str]:
    """Sentences of a chunk (the whole chunk if it has none long enough), cut as the evidence step
    cuts them (:mod:`ragkit.index.sentences`), so both read one set of cached sentence vectors."""
    return split_sentences(text, min_chars) or [text]


@component
class Reranker:
    def __init__(
        self,
        backend: RerankBackend = "bi-encoder",
        model: str | None = None,
        chat_generator: Any = None,
        top_k: int | None = None,
        max_chars_per_doc: int = 1200,
        fuse_with_retrieval: bool | None = None,
        retrieval_weight: float = 1.0,
    ):
        if backend not in ("cross-encoder", "llm", "bi-encoder"):
            raise ValueError(f"backend must be cross-encoder, llm or bi-encoder, not {backend!r}")
        if backend == "cross-encoder" and not model:
            raise ValueError("the cross-encoder backend needs model= (a CrossEncoder hub id or local folder)")
        if backend == "llm" and chat_generator is None:
            raise ValueError("the llm backend needs a chat generator")
        if not retrieval_weight > 0:
            raise ValueError(f"retrieval_weight must be above 0, not {retrieval_weight!r}")
        self.backend = backend
        self.model = model
        self.chat_generator = chat_generator
        self.top_k = top_k
        self.max_chars_per_doc = max_chars_per_doc
        self.fuse_with_retrieval = fuse_with_retrieval
        self.retrieval_weight = retrieval_weight
        self._ranker = None
        self._embedder = None
        self._probe = probe_for(chat_generator) if chat_generator is not None and LlamaProbe.supports(chat_generator) else None

    def warm_up(self) -> None:
        if self.backend == "cross-encoder" and self._ranker is None:
            from haystack_integrations.components.rankers.sentence_transformers import SentenceTransformersSimilarityRanker

            from ragkit.llm.models import quiet_weight_loading, resolve_embedder

            self._ranker = SentenceTransformersSimilarityRanker(model=resolve_embedder(self.model), top_k=1_000_000, scale_score=True)
            with quiet_weight_loading():
                self._ranker.warm_up()
        elif self.backend == "bi-encoder" and self._embedder is None:
            from ragkit.llm.generators import shared_text_embedder

            self._embedder = shared_text_embedder(self.model or "all-MiniLM-L6-v2")
        elif self.backend == "llm" and hasattr(self.chat_generator, "warm_up"):
            self.chat_generator.warm_up()

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(
            self, backend=self.backend, model=self.model, chat_generator=generator_to_dict(self.chat_generator),
            top_k=self.top_k, max_chars_per_doc=self.max_chars_per_doc, fuse_with_retrieval=self.fuse_with_retrieval,
            retrieval_weight=self.retrieval_weight,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Reranker":
        return default_from_dict(cls, generator_from_dict(data))

    def sentence_cache(self) -> SentenceVectorCache:
        """The process-wide sentence vectors of this bi-encoder's model."""
        return SentenceVectorCache.for_model(self.model or "all-MiniLM-L6-v2")

    def prepare(self, documents: list[Document], progress: bool = False) -> int:
        """Bi-encoder only: give every sentence of ``documents`` (say, a whole index) its vector
        now, so reranking them later embeds only the question. Returns how many were new."""
        if self.backend != "bi-encoder":
            return 0
        return self.sentence_cache().precompute((s for d in documents for s in split_passage(d.content or "")), progress=progress)

    def _scores(self, query: str, documents: list[Document]) -> list[float]:
        if self.backend == "cross-encoder":
            ranked = self._ranker.run(query=query, documents=documents)["documents"]
            by_id = {d.id: d.score for d in ranked}
            return [float(by_id[d.id]) for d in documents]
        if self.backend == "bi-encoder":
            pieces = [(i, s) for i, d in enumerate(documents) for s in split_passage(d.content or "")]
            query_vector = np.asarray(self._embedder.embedding_backend.embed([query], normalize_embeddings=True, show_progress_bar=False), dtype=np.float32)[0]
            cache = self.sentence_cache()
            before = cache.embedded
            sentence_vectors = cache.vectors([s for _, s in pieces])
            record(decision={"sentences": len(pieces), "sentences_embedded_now": cache.embedded - before})
            best = np.full(len(documents), -1.0)
            for (i, _), sim in zip(pieces, sentence_vectors @ query_vector):
                best[i] = max(best[i], float(sim))
            return best.tolist()
        served = self._probe is None and backend_of(self.chat_generator) == "openai"
        if self._probe is None and not served:
            raise RuntimeError("the llm reranker reads token probabilities: it needs a llama.cpp model or an OpenAI-compatible server")
        mark = self._probe.mark() if self._probe is not None else None
        scores = []
        for doc in documents:
            # Question first: it is the shared prefix, so each passage costs only its own tokens.
            passage = (doc.content or "")[: self.max_chars_per_doc].replace("<", "&lt;")
            messages = [
                ChatMessage.from_system(RERANK_SYSTEM),
                ChatMessage.from_user(f"Question: {query}\n\nPassage:\n{passage}\n\nDoes the passage help answer the question? yes or no"),
            ]
            if not served:
                scores.append(self._probe.choice_probs(messages, RERANK_WORDS)["yes"])
                continue
            probs = server_choice_probs(self.chat_generator, messages, RERANK_WORDS, step="reranker")
            if probs is None:
                raise RuntimeError("the server gave no yes/no probabilities to rank by")
            scores.append(probs["yes"])
        if mark is not None:
            record(**self._probe.usage_since(mark, calls=len(documents)))
        return scores

    @component.output_types(documents=list[Document], reranking=dict)
    def run(self, query: str, documents: list[Document], top_k: int | None = None) -> dict[str, Any]:
        top_k = top_k or self.top_k or len(documents)
        info: dict[str, Any] = {"backend": self.backend}
        if not documents:
            return {"documents": [], "reranking": {**info, "order": []}}
        try:
            self.warm_up()
            scores = self._scores(query, documents)
        except Exception as exc:  # keep retrieval's order rather than fail the question
            info["fallback"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            record(fallback=f"reranker: {info['fallback']}")
            return {"documents": list(documents)[:top_k], "reranking": info}
        rescored = [
            replace(doc, score=float(s), meta={**doc.meta, "retrieval_score": doc.score}) for doc, s in zip(documents, scores)
        ]
        order = sorted(range(len(rescored)), key=lambda i: rescored[i].score, reverse=True)
        fuse = self.fuse_with_retrieval if self.fuse_with_retrieval is not None else self.backend != "cross-encoder"
        if fuse:
            order = fused_order([d.score for d in rescored], self.retrieval_weight)
            info["fused_with_retrieval"] = True
        info["order"] = order[:top_k]
        record(decision={"moved": sum(1 for rank, i in enumerate(order[:top_k]) if rank != i)})
        return {"documents": [rescored[i] for i in order[:top_k]], "reranking": info}
