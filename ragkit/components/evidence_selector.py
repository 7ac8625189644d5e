"""EvidenceSelector: the one sentence of the sources a grounded answer is copied from.

A 0.5–1.5B model given three paragraphs and asked for the phrase that answers copies from the wrong
place more often than from the right one; given the one sentence that most likely holds the answer,
it picks the right phrase there most of the time. Which sentence is not a question for the model: on
new_wiki development questions the model's own choice among the three best sentences (its first-token
preference, or its 0–10 grades of them) found the answer's sentence less often than this step does
with no model at all (``bench/evidence_dev.py``; the numbers are in the README). So for a grounded
answer this step ranks every sentence of the sources by

    score = IDF-weighted share of the question's terms the sentence contains   (the index's own BM25 statistics;
                                                                              wh-words left out)
          + cosine between the question and the sentence                      (the embedder's sentence vectors)
          + 0.2 if it holds the kind of thing asked for                       (a year for "when", a number for
                                                                              "how many", a new name for "who"/"where")

and hands the best ``sentences`` on as small Documents (``meta``: ``cite`` — the source's 1-based
number, which the answer cites; ``chunk_id``; ``offset`` — where the sentence starts in that source),
with ``signals`` for the confidence step: the best score, its margin over the runner-up, and how much
of the question the sentence covers. In the free answer mode it does nothing.

IDF comes from the index's BM25 model (``RagIndex.term_weights``); without an index, from the
sources' own sentences. Sentence vectors come from the process-wide
:class:`~ragkit.index.sentence_vectors.SentenceVectorCache` the bi-encoder reranker fills, so a
sentence is embedded once per process (or loaded with the index). Milliseconds per question.
Hand-written: sentence ranking for extraction is a few lines over pieces ragkit already has
(Haystack's rankers score whole documents).

Usage::

    selector = EvidenceSelector(index_path=".ragkit/index")
    out = selector.run(query="Where was Tesla born?", documents=docs, mode="grounded")
    out["evidence"][0].content, out["evidence"][0].meta["cite"], out["signals"]["evidence_margin"]
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Any, Optional

import numpy as np
from haystack import Document, component, default_from_dict, default_to_dict

from ragkit.index.handle import IndexHandle
from ragkit.index.sentences import sentence_spans
from ragkit.index.store import RagIndex
from ragkit.pipeline.trace import record

EVIDENCE_SIGNALS = ("evidence_score", "evidence_margin", "evidence_coverage")

# The wh-word says what the question asks, not what it is about: "Where was Tesla born?" is about
# Tesla's birth, and a sentence that merely contains "where" covers nothing of it.
QUESTION_WORDS = frozenset("what which who whom whose when where whi how mani much did doe do was were are is".split())
# Score added when a sentence holds something of the kind the question asks for (a year for "when",
# a number for "how many", a name not in the question for "who"/"where"); chosen on the first half
# of the new_wiki development questions, checked on the second (bench/evidence_dev.py).
TYPE_BONUS = 0.2
_YEAR_OR_DATE = re.compile(r"\b(1[0-9]{3}|20[0-9]{2})s?\b|\b(January|February|March|April|May|June|July|August|September|October|November|December|century)\b")
_NUMBER = re.compile(r"\d|\b(one|two|three|four|five|six|seven|eight|nine|ten|hundred|thousand|million|billion|dozen)\b", re.I)
_NAME = re.compile(r"(?<!^)(?<![.!?]\s)\b[A-Z][a-z]+")


def answer_type(question: str) -> str | None:
    """What kind of thing the question asks for: ``date``, ``number``, ``name`` or None (anything)."""
    q = question.lower()
    if re.search(r"\bwhen\b|what (year|date|century|decade)|which (year|century)", q):
        return "date"
    if re.search(r"how (many|much|long|old|far|large|big|tall|high)|what (percentage|percent|number|amount)", q):
        return "number"
    if re.search(r"\bwho(m|se)?\b|\bwhere\b", q):
        return "name"
    return None


def holds_answer_type(wanted: str | None, sentence: str, question: str) -> bool:
    if wanted == "date":
        return bool(_YEAR_OR_DATE.search(sentence))
    if wanted == "number":
        return bool(_NUMBER.search(sentence))
    if wanted == "name":
        asked = {w.lower() for w in re.findall(r"\w+", question)}
        return any(m.group(0).lower() not in asked for m in _NAME.finditer(sentence))
    return False


@component
class EvidenceSelector:
    def __init__(self, index: RagIndex | None = None, index_path: str | None = None, embedder: str = "all-MiniLM-L6-v2", sentences: int = 1):
        if sentences < 1:
            raise ValueError("sentences must be >= 1")
        self._handle = IndexHandle(index, index_path) if (index is not None or index_path is not None) else None
        self.embedder = embedder
        self.sentences = sentences
        self._sparse_source: Any = None

    def warm_up(self) -> None:
        if self._handle is not None and self._sparse_source is None:
            self._sparse_source = self._handle.get()

    def to_dict(self) -> dict[str, Any]:
        if self._handle is not None and self._handle.index_path is None:
            raise ValueError("an in-memory index cannot be serialized; save it first (RagIndex.save)")
        return default_to_dict(self, index_path=self._handle.index_path if self._handle else None, embedder=self.embedder, sentences=self.sentences)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "EvidenceSelector":
        return default_from_dict(cls, data)

    # -- scoring -------------------------------------------------------------------------------------
    def _coverage(self, question: str, texts: list[str]) -> list[float]:
        """IDF-weighted share of the question's content terms each text contains."""
        if self._sparse_source is not None:
            weights = {t: w for t, w in self._sparse_source.term_weights(question).items() if t not in QUESTION_WORDS}
            terms = self._sparse_source.terms(texts)
        else:  # no index: document frequencies over these sentences
            from ragkit.index.sparse import BM25sIndex

            tokenizer = BM25sIndex()
            terms = [set(t) for t in tokenizer._tokenize(texts)] if texts else []
            df = Counter(t for ts in terms for t in ts)
            weights = {t: math.log((len(texts) + 1) / (df[t] + 0.5)) for t in tokenizer._tokenize([question])[0] if t in df and t not in QUESTION_WORDS}
        total = sum(weights.values())
        if not total:
            return [0.0] * len(texts)
        return [sum(w for t, w in weights.items() if t in ts) / total for ts in terms]

    def _cosines(self, question: str, texts: list[str]) -> list[float]:
        from ragkit.index.sentence_vectors import SentenceVectorCache
        from ragkit.llm.generators import shared_text_embedder

        try:
            vectors = SentenceVectorCache.for_model(self.embedder).vectors(texts)
            query = np.asarray(shared_text_embedder(self.embedder).run(text=question)["embedding"], dtype=np.float32)
        except Exception as exc:  # no embedder: rank by the terms alone, and say so
            record(fallback=f"evidence: sentence vectors unavailable ({type(exc).__name__}: {str(exc)[:120]}); ranked by terms only")
            return [0.0] * len(texts)
        return (vectors @ query).astype(float).tolist()

    def rank(self, question: str, documents: list[Document]) -> list[Document]:
        """Every sentence of ``documents`` as a Document, best first (``meta["evidence_score"]``)."""
        self.warm_up()
        found: list[tuple[int, Document, int, int]] = []
        for cite, doc in enumerate(documents, 1):
            text = doc.content or ""
            # a markdown heading names a topic and states nothing: never the sentence an answer is copied from
            found += [(cite, doc, a, b) for a, b in sentence_spans(text) if not text.startswith("#", a)]
        if not found:
            return []
        texts = [(doc.content or "")[a:b] for _, doc, a, b in found]
        coverage = self._coverage(question, texts)
        cosines = self._cosines(question, texts)
        wanted = answer_type(question)
        typed = [TYPE_BONUS * holds_answer_type(wanted, t, question) for t in texts]
        scores = [c + s + t for c, s, t in zip(coverage, cosines, typed)]
        ranked = sorted(range(len(found)), key=lambda i: (-scores[i], i))
        out = []
        for i in ranked:
            cite, doc, a, b = found[i]
            out.append(Document(content=texts[i], meta={
                "title": doc.meta.get("title", ""), "source": doc.meta.get("source"), "cite": cite, "chunk_id": doc.id, "offset": a,
                "evidence_score": round(scores[i], 4), "coverage": round(coverage[i], 4), "cosine": round(cosines[i], 4), "answer_type": typed[i] > 0,
            }))
        return out

    @component.output_types(evidence=list[Document], signals=dict)
    def run(self, query: str, documents: list[Document], mode: Optional[str] = None) -> dict[str, Any]:
        """``mode``: the answer mode; only a grounded answer reads evidence (free text reads whole sources)."""
        if mode == "free" or not documents:
            return {"evidence": [], "signals": {}}
        ranked = self.rank(query, documents)
        if not ranked:
            return {"evidence": [], "signals": {}}
        best = ranked[0].meta
        runner_up = ranked[1].meta["evidence_score"] if len(ranked) > 1 else 0.0
        signals = {"evidence_score": best["evidence_score"], "evidence_margin": round(best["evidence_score"] - runner_up, 4), "evidence_coverage": best["coverage"]}
        record(decision={"sentence": f"source {best['cite']}", "score": best["evidence_score"], "margin": signals["evidence_margin"], "candidates": len(ranked)})
        return {"evidence": ranked[: self.sentences], "signals": signals}
