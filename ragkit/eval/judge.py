"""The local judge of an evaluation run: faithfulness and context relevance, each read as P(yes).

* **faithfulness** — do the sources support the answer, given the question? The engine's own
  :class:`~ragkit.components.hallucination_detector.HallucinationDetector` (every answer sentence a
  forward pass over the cached sources; the lowest sentence counts), here always asked, spans too;
* **context relevance** — do the sources state the answer to the question? One forward pass of the
  sufficiency task (:func:`ragkit.llm.prompts.sufficiency_task`) over the sources.

With llama.cpp both are probabilities read from the next-token distribution, so a reply cannot fail
to parse; with a server they are a yes/no reply under a JSON-schema constraint. Whatever still fails —
the endpoint, the deadline — is ``(None, reason)``, counted as a failure by the run, never a score.
The judge may be another model than the pipeline's (``ragkit eval --judge-llm``): a small model
judging its own answers is the weakest judge there is.

Usage::

    judge = LocalJudge(chat_generator=llm)
    judge("Where was Tesla born?", "Smiljan [1]", sources)   # {"faithfulness": (0.81, None), "context_relevance": (0.64, None)}
"""

from __future__ import annotations

from typing import Any

from haystack import Document

from ragkit.components.hallucination_detector import HallucinationDetector
from ragkit.llm.prompts import context_messages, sufficiency_task
from ragkit.llm.structured import yes_probability


class LocalJudge:
    def __init__(self, chat_generator: Any, max_sources: int = 5):
        self.chat_generator, self.max_sources = chat_generator, max_sources
        self._detector = HallucinationDetector(backend="llm_judge", chat_generator=chat_generator, judge_spans=True)

    def faithfulness(self, question: str, answer: str, sources: list[Document]) -> tuple[float | None, str | None]:
        out = self._detector.run(replies=[answer], documents=sources[: self.max_sources], query=question)
        if out["score"] is None:
            return None, f"judge: {out['hallucination'].get('fallback') or 'no score'}"
        return float(out["score"]), None

    def context_relevance(self, question: str, sources: list[Document]) -> tuple[float | None, str | None]:
        try:
            return yes_probability(self.chat_generator, context_messages(sources[: self.max_sources], sufficiency_task(question)), step="judge"), None
        except Exception as exc:  # an unusable reply or a dead endpoint: a counted failure, not a score
            return None, f"judge: {str(exc)[:160]}"

    def __call__(self, question: str, answer: str, sources: list[Document]) -> dict[str, tuple[float | None, str | None]]:
        return {"faithfulness": self.faithfulness(question, answer, sources), "context_relevance": self.context_relevance(question, sources)}
