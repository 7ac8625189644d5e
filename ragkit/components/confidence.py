"""ConfidenceScorer: one number in [0, 1] from retrieval, grading and hallucination signals.

Signals (each in [0, 1], each optional):

* ``retrieval`` — the best retrieved chunk's score: cosine for dense, the fused RRF score for
  hybrid (1.0 when both retrievers rank it first), BM25 squashed by s / (s + 5) for sparse;
* ``grading`` — the best grade among kept chunks, / 10;
* ``support`` — the hallucination check's score (lowest sentence P(supported)). Given the
  check's ``support_threshold``, the score is first rescaled so that the threshold sits at 0.5
  (piecewise linear: 0 → 0, threshold → 0.5, 1 → 1) — judges of different models put their
  boundary in different places (0.39 for the 0.5B, 0.56 for the 1.5B) — and an answer that
  failed the check is capped at that rescaled score: it never shows better than ○, and one far
  below the threshold falls under the floor and is declined.

Confidence is their weighted mean over the signals present (default weights 0.2 / 0.3 / 0.5: the
support check looks at the answer itself, the others only at the evidence). Shown as ● (> 0.7),
◐ (0.5–0.7), ○ (< 0.5). Below ``floor`` the pipeline declines: the answer becomes "The documents
don't say." and the closest sources are listed instead.

Usage::

    scorer = ConfidenceScorer(floor=0.35)
    scorer.run(documents=docs, grades=[8, 3], support=0.9)   # {"confidence": 0.84, "symbol": "●", ...}
"""

from __future__ import annotations

from typing import Any, Optional

from haystack import Document, component, default_from_dict, default_to_dict

from ragkit.trace import record

DEFAULT_WEIGHTS = {"retrieval": 0.2, "grading": 0.3, "support": 0.5}


def rescale_support(score: float, threshold: float) -> float:
    """Map a judge score so its decision threshold lands on 0.5."""
    if threshold <= 0.0 or threshold >= 1.0:
        return score
    return 0.5 * score / threshold if score < threshold else 0.5 + 0.5 * (score - threshold) / (1.0 - threshold)


def symbol(confidence: float) -> str:
    return "●" if confidence > 0.7 else ("◐" if confidence >= 0.5 else "○")


def retrieval_signal(documents: list[Document]) -> float | None:
    scores = [d.score for d in documents if d.score is not None]
    if not scores:
        return None
    best = max(scores)
    return float(best) if 0.0 <= best <= 1.0 else float(best / (best + 5.0)) if best > 0 else 0.0


@component
class ConfidenceScorer:
    def __init__(self, floor: float = 0.35, weights: dict[str, float] | None = None):
        if not 0.0 <= floor <= 1.0:
            raise ValueError("floor must be in [0, 1]")
        self.floor = floor
        self.weights = dict(weights or DEFAULT_WEIGHTS)
        if set(self.weights) - set(DEFAULT_WEIGHTS) or any(w < 0 for w in self.weights.values()):
            raise ValueError(f"weights must be non-negative and named from {sorted(DEFAULT_WEIGHTS)}")

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, floor=self.floor, weights=self.weights)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ConfidenceScorer":
        return default_from_dict(cls, data)

    @component.output_types(confidence=float, symbol=str, decline=bool, components=dict)
    def run(
        self,
        documents: list[Document],
        grades: Optional[list[Optional[float]]] = None,
        support: Optional[float] = None,
        support_threshold: Optional[float] = None,
    ) -> dict[str, Any]:
        signals: dict[str, float] = {}
        retrieval = retrieval_signal(documents)
        if retrieval is not None:
            signals["retrieval"] = retrieval
        known_grades = [g for g in (grades or []) if g is not None]
        if known_grades:
            signals["grading"] = max(known_grades) / 10.0
        if support is not None:
            signals["support"] = rescale_support(float(support), support_threshold) if support_threshold is not None else float(support)
        if not documents:
            confidence = 0.0
        else:
            total = sum(self.weights.get(k, 0.0) for k in signals)
            confidence = sum(self.weights.get(k, 0.0) * v for k, v in signals.items()) / total if total else 0.0
        if support is not None and support_threshold is not None and support < support_threshold:
            confidence = min(confidence, signals["support"])  # a failed check caps the confidence
        confidence = min(max(confidence, 0.0), 1.0)
        decline = confidence < self.floor
        record(decision={"confidence": round(confidence, 3), "decline": decline})
        return {"confidence": confidence, "symbol": symbol(confidence), "decline": decline, "components": {k: round(v, 4) for k, v in signals.items()}}
