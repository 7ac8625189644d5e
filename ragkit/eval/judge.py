"""The local judge of an evaluation run: faithfulness and context relevance, each read as P(yes).

* **faithfulness** — do the sources support this answer *to this question*? One forward pass over the
  sources by default (task ``correct``: "according to the sources, is this answer correct?"). A short
  span copied from the wrong sentence is "stated in the sources" yet wrong, so asking about the answer
  as the answer to the question separates right from wrong better: on 80 SQuAD dev questions outside
  every scored set (``bench/judge_prompt_dev.py``) its AUC against gold correctness was 0.80, the
  engine's per-sentence hallucination check (task ``sentences``) 0.78, "do the sources state that this is
  the answer" (``answers_question``) 0.76 — close; ``correct`` is also one pass where ``sentences`` is one a sentence;
* **context relevance** — do the sources state the answer to the question? One forward pass of the
  sufficiency task (:func:`ragkit.llm.prompts.sufficiency_task`) over the sources.

With llama.cpp both are probabilities read from the next-token distribution, so a reply cannot fail
to parse; with a server they are a yes/no reply under a JSON-schema constraint. Whatever still fails —
the endpoint, the deadline — is ``(None, reason)``, counted as a failure by the run, never a score.
The judge may be another model than the pipeline's (``ragkit eval --judge-llm``): a small model
judging its own answers is the weakest judge there is.

Usage::

    judge = LocalJudge(chat_generator=llm, model_name="qwen2.5-coder-1.5b")
    judge("Where was Tesla born?", "Smiljan [1]", sources)   # {"faithfulness": (0.81, None), "context_relevance": (0.64, None)}
"""

from __future__ import annotations

from typing import Any

from haystack import Document

from ragkit.components.hallucination_detector import HallucinationDetector
from ragkit.eval.metrics import strip_citations
from ragkit.llm.prompts import context_messages, sufficiency_task
from ragkit.llm.structured import yes_probability


def answers_question_task(question: str, answer: str) -> str:
    return (f"Question: {question}\nProposed answer: {strip_citations(answer)}\n"
            "Do the sources state that the proposed answer is the answer to this question? Reply yes or no.")


def correct_task(question: str, answer: str) -> str:
    return f"Question: {question}\nAnswer: {strip_citations(answer)}\nAccording to the sources, is this answer correct? Reply yes or no."


# "sentences": the engine's hallucination check, every answer sentence against the sources; the others
# one forward pass asking about the answer *as the answer to the question* (a span copied from the
# wrong sentence is "stated in the sources" but does not answer the question).
FAITHFULNESS_TASKS: dict[str, Any] = {"sentences": None, "answers_question": answers_question_task, "correct": correct_task}
DEFAULT_TASK = "correct"  # best of the three on bench/judge_prompt_dev.py (AUC 0.80 vs 0.78, 0.76; 80 other SQuAD dev questions)


class LocalJudge:
    def __init__(self, chat_generator: Any, max_sources: int = 5, task: str = DEFAULT_TASK, model_name: str | None = None):
        if task not in FAITHFULNESS_TASKS:
            raise ValueError(f"the judge's faithfulness task is one of {sorted(FAITHFULNESS_TASKS)}, not {task!r}")
        self.chat_generator, self.max_sources, self.task, self.model_name = chat_generator, max_sources, task, model_name
        self._detector = HallucinationDetector(backend="llm_judge", chat_generator=chat_generator, judge_spans=True)

    @property
    def label(self) -> str:
        """What a run records as its judge: the model and the faithfulness task (a resumed run must not mix two)."""
        return f"{self.model_name or 'judge'} ({self.task} task)"

    def faithfulness(self, question: str, answer: str, sources: list[Document]) -> tuple[float | None, str | None]:
        if FAITHFULNESS_TASKS[self.task] is not None:
            try:
                task = FAITHFULNESS_TASKS[self.task](question, answer)
                return yes_probability(self.chat_generator, context_messages(sources[: self.max_sources], task), step="judge"), None
            except Exception as exc:  # an unusable reply or a dead endpoint: a counted failure, not a score
                return None, f"judge: {str(exc)[:160]}"
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
