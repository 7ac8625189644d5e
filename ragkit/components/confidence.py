"""ConfidenceScorer: the estimated probability that the answer is correct, from signals that cost nothing extra.

"Correct" means SQuAD token F1 >= 0.5 against gold answers (:data:`ragkit.eval.calibration.DEFINITION`).
The probability comes from a logistic regression calibrated per model on held-out questions
(``bench/calibration.py`` → ``ragkit/data/confidence_calibration.json``; scored in
``bench/results/calibration.json``) over these signals:

* the answer's own token probabilities (read from llama.cpp while it was generated, or a server's ``logprobs``) — geometric mean,
  minimum, first token;
* the answer's words: length, share found in the sources, verbatim in a source, share that only
  repeats the question;
* retrieval: best dense cosine and BM25 score, their margins over the runner-up, whether dense and
  sparse agree on the first chunk and how much of their top 5 they share;
* for a grounded answer, its evidence sentence: its score, its margin over the next sentence and how
  much of the question it covers (``evidence_signals``, from :class:`~ragkit.components.evidence_selector.EvidenceSelector`);
* when those steps ran: the grader's best grade (0–10) and the judge's support score.

Rules on top of the model:

* a **decline** is not a confident answer: confidence 0 (○), and ``p_lacks_answer`` — how sure the
  system is that the documents lack the answer (P(the right passage is not among the sources), from
  retrieval signals) — is reported separately;
* a **failed step** (an LLM error, a timeout, an unparseable reply) or a degraded one (a reply cut at
  ``max_tokens``, a prompt trimmed to fit the context) can never raise confidence: it is capped
  under 0.5 (○) and the steps are named;
* no calibration for the model: the first shipped model's fit is borrowed and ``calibration`` says so.

In the engine's graph the signals arrive along edges: ``signals`` from the retriever,
``answer_tokens`` and ``answer_ok`` from the answer step, grades from the documents' ``grade``
meta, ``support`` from the self-correction router. Failed steps are the one fact no edge carries
(any step may fail): unless given, they are read from the ragkit trace being collected for this
question (:func:`ragkit.pipeline.trace.failed_steps`); run without a ragkit tracer, only the answer's
own ``answer_ok`` caps the confidence.

Shown as ● (> 0.7: right more often than 7 times in 10), ◐ (0.5–0.7), ○ (< 0.5). Below ``floor``
the pipeline declines and lists the closest sources instead.

Usage::

    scorer = ConfidenceScorer(floor=0.1, model="qwen2.5-coder-0.5b")
    out = scorer.run(documents=docs, replies=["Smiljan [1]"], query="Where was Tesla born?",
                     signals={"token_p_mean": 0.91, "dense_top": 0.62, ...})
    out["confidence"], out["symbol"], out["components"]
"""

from __future__ import annotations

from typing import Any, Optional, Union

from haystack import Document, component, default_from_dict, default_to_dict
from haystack.dataclasses import ChatMessage

from ragkit.eval.calibration import AGENTIC_SIGNALS, BASE_SIGNALS, FAILED_STEP_CAP, answer_signals, calibrated_confidence, model_calibration, predict
from ragkit.llm.prompts import NO_ANSWER, reply_text
from ragkit.pipeline.trace import active_trace, degraded_steps, record

TOKEN_SIGNALS = ("token_p_mean", "token_p_min", "token_p_first")

HIGH, MEDIUM = 0.7, 0.5


def rescale_support(score: float, threshold: float) -> float:
    """Map a judge score so its decision threshold lands on 0.5 (judges of different models put
    their boundary in different places)."""
    if threshold <= 0.0 or threshold >= 1.0:
        return score
    return 0.5 * score / threshold if score < threshold else 0.5 + 0.5 * (score - threshold) / (1.0 - threshold)


def symbol(confidence: float) -> str:
    return "●" if confidence > HIGH else ("◐" if confidence >= MEDIUM else "○")


def is_decline(answer: str | None) -> bool:
    return (answer or "").strip().lower().startswith(NO_ANSWER.lower())


@component
class ConfidenceScorer:
    def __init__(self, floor: float = 0.0, model: str | None = None, calibration: dict[str, Any] | None = None):
        if not 0.0 <= floor <= 1.0:
            raise ValueError("floor must be in [0, 1]")
        self.floor = floor
        self.model = model
        self.calibration = calibration  # None: the file shipped with ragkit
        self._calibrated_as, self._models = model_calibration(model, calibration)

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, floor=self.floor, model=self.model, calibration=self.calibration)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ConfidenceScorer":
        return default_from_dict(cls, data)

    def _signals(self, documents, answer, question, grades, support, support_threshold, signals) -> dict[str, float]:
        out = {k: float(v) for k, v in (signals or {}).items() if v is not None}
        if answer is not None:
            out.update(answer_signals(answer, question or "", (d.content or "" for d in documents)))
        known_grades = [g for g in (grades or []) if g is not None]
        if known_grades:
            out["grade_max"] = max(known_grades)
        if support is not None:
            out["support"] = rescale_support(float(support), support_threshold) if support_threshold is not None else float(support)
        return out

    @component.output_types(confidence=float, symbol=str, decline=bool, components=dict, p_lacks_answer=float)
    def run(
        self,
        documents: list[Document],
        replies: Union[list[ChatMessage], list[str]],
        query: Optional[str] = None,
        grades: Optional[list[Optional[float]]] = None,
        support: Optional[float] = None,
        support_threshold: Optional[float] = None,
        signals: Optional[dict] = None,
        failed_steps: Optional[list[str]] = None,
        answer_ok: Optional[bool] = None,
        answer_tokens: Optional[dict] = None,
        evidence_signals: Optional[dict] = None,
    ) -> dict[str, Any]:
        signals = {**(signals or {}), **(evidence_signals or {}), **{k: v for k, v in (answer_tokens or {}).items() if k in TOKEN_SIGNALS}}
        if grades is None and any("grade" in d.meta for d in documents):
            grades = [d.meta.get("grade") for d in documents]
        if failed_steps is None:
            trace = active_trace()
            failed_steps = degraded_steps(trace) if trace is not None else []
        if answer_ok is False and "answer" not in failed_steps:
            failed_steps = [*failed_steps, "answer"]
        answer = reply_text(replies)
        values = self._signals(documents, answer, query, grades, support, support_threshold, signals)
        models = self._models or {}
        lacks_model = models.get("lacks_answer")
        p_lacks = predict(lacks_model, values) if (lacks_model and documents) else (1.0 if not documents else None)
        confidence, fit_name = calibrated_confidence(models, values, answered=bool(documents) and not is_decline(answer), failed=bool(failed_steps))
        components: dict[str, Any] = {k: round(v, 4) for k, v in values.items() if k in AGENTIC_SIGNALS}  # raw, as the fit reads them
        components["calibration"] = f"{self._calibrated_as}/{fit_name}" if fit_name else "uncalibrated"
        if failed_steps:
            components["failed_steps"] = list(failed_steps)
        decline = bool(documents) and not is_decline(answer) and confidence < self.floor
        record(decision={"confidence": round(confidence, 3), "decline": decline, **({"failed": ",".join(failed_steps)} if failed_steps else {})})
        return {
            "confidence": confidence,
            "symbol": symbol(confidence),
            "decline": decline,
            "components": components,
            "p_lacks_answer": round(p_lacks, 4) if p_lacks is not None else None,
        }


__all__ = ["ConfidenceScorer", "calibrated_confidence", "rescale_support", "symbol", "is_decline", "BASE_SIGNALS", "FAILED_STEP_CAP"]
