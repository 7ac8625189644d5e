"""The local judge of an evaluation run: faithfulness and context relevance.

* **faithfulness** — do the sources support this answer *to this question*? A score in [0, 1] that ranks
  answers (higher: more likely right), not a calibrated probability. With a llama.cpp judge, by default
  (task ``correct_x_likelihood``) P(yes) to "according to the sources, is this answer correct?" times the
  judge model's own likelihood of the answer as its reply to the engine's grounded-answer task over the
  same sources (the geometric mean of its token probabilities; no weight fitted). Chosen on SQuAD dev
  questions outside every scored set (``bench/judge_prompt_dev.py --answer-likelihood``, 158 answers):
  AUC against gold correctness 0.85 against P(yes) alone 0.76 — a wrong span is one the judge would
  rarely have picked itself, even where it calls it correct. The likelihood is read from the model's
  logits, so a server judge (no log-probabilities for a reply it did not write) uses task ``correct`` alone. Among the
  P(yes) tasks, on 80 of those questions: ``correct`` 0.80, the engine's per-sentence hallucination check
  (``sentences``) 0.78, "do the sources state that this is the answer" (``answers_question``) 0.76; a
  short span copied from the wrong sentence is "stated in the sources" yet wrong, so asking about the
  answer as the answer to the question separates right from wrong better;
* **context relevance** — P(yes): do the sources state the answer to the question? One forward pass of
  the sufficiency task (:func:`ragkit.llm.prompts.sufficiency_task`) over the sources.

With llama.cpp the yes/no answers are probabilities read from the next-token distribution, so a reply
cannot fail to parse; with a server, from its top log-probabilities of a one-token reply, or where it gives
none a yes/no reply under a JSON-schema constraint (:mod:`ragkit.llm.judgments`). Whatever still fails —
the endpoint, the deadline — is ``(None, reason)``, counted as a failure by the run, never a score.
The judge may be another model than the pipeline's (``ragkit eval --judge-llm``): a small model
judging its own answers is the weakest judge there is.

Usage::

    judge = LocalJudge(chat_generator=llm, model_name="qwen2.5-coder-1.5b")
    judge("Where was Tesla born?", "Smiljan [1]", sources)   # {"faithfulness": (score, None), "context_relevance": (p_yes, None)}
"""

from __future__ import annotations

import math
from typing import Any

from haystack import Document

from ragkit.components.hallucination_detector import HallucinationDetector
from ragkit.eval.metrics import strip_citations
from ragkit.llm.probe import LlamaProbe, probe_for
from ragkit.llm.prompts import context_messages, grounded_answer_task, sufficiency_task
from ragkit.llm.judgments import yes_probability
from ragkit.pipeline.trace import record


def answers_question_task(question: str, answer: str) -> str:
    return (f"Question: {question}\nProposed answer: {strip_citations(answer)}\n"
            "Do the sources state that the proposed answer is the answer to this question? Reply yes or no.")


def correct_task(question: str, answer: str) -> str:
    return f"Question: {question}\nAnswer: {strip_citations(answer)}\nAccording to the sources, is this answer correct? Reply yes or no."


LIKELIHOOD_TASK = "correct_x_likelihood"
# "sentences": the engine's hallucination check, every answer sentence against the sources; the others
# ask about the answer *as the answer to the question* (a span copied from the wrong sentence is "stated
# in the sources" but does not answer the question), the last also reading the judge's likelihood of it.
FAITHFULNESS_TASKS: dict[str, Any] = {"sentences": None, "answers_question": answers_question_task, "correct": correct_task,
                                      LIKELIHOOD_TASK: correct_task}
DEFAULT_TASK = LIKELIHOOD_TASK  # a llama.cpp judge's; AUC 0.85 vs P(yes) alone 0.76 on bench/judge_prompt_dev.py --answer-likelihood
SERVER_TASK = "correct"  # best P(yes) task on bench/judge_prompt_dev.py (AUC 0.80 vs 0.78, 0.76; 80 other SQuAD dev questions)


def default_task(chat_generator: Any) -> str:
    """The judge's faithfulness task when none is named: the likelihood needs the model's logits (llama.cpp)."""
    return DEFAULT_TASK if LlamaProbe.supports(chat_generator) else SERVER_TASK


def calls_per_answer(label: str | None) -> int:
    """LLM calls the judge whose ``label`` a run recorded makes per answer: its faithfulness (two passes where it
    reads the answer's likelihood too) and context relevance; none without a judge."""
    if label is None:
        return 0
    return 3 if label.endswith(f"({LIKELIHOOD_TASK} task)") else 2


def judge_model_of(label: str) -> str:
    """The judge model's name in the ``label`` a run recorded (:attr:`LocalJudge.label`: "MODEL (TASK task)")."""
    return label.rsplit(" (", 1)[0]


class LocalJudge:
    def __init__(self, chat_generator: Any, max_sources: int = 5, task: str | None = None, model_name: str | None = None):
        task = task or default_task(chat_generator)
        if task not in FAITHFULNESS_TASKS:
            raise ValueError(f"the judge's faithfulness task is one of {sorted(FAITHFULNESS_TASKS)}, not {task!r}")
        if task == LIKELIHOOD_TASK and not LlamaProbe.supports(chat_generator):
            raise ValueError(f"the judge's {LIKELIHOOD_TASK!r} task reads the answer's likelihood from the model's logits, which only a "
                             f"llama.cpp judge gives; with this one use task={SERVER_TASK!r}")
        self.chat_generator, self.max_sources, self.task, self.model_name = chat_generator, max_sources, task, model_name
        self._detector = HallucinationDetector(backend="llm_judge", chat_generator=chat_generator, judge_spans=True)

    @property
    def label(self) -> str:
        """What a run records as its judge: the model and the faithfulness task (a resumed run must not mix two)."""
        return f"{self.model_name or 'judge'} ({self.task} task)"

    def answer_logprobs(self, question: str, answer: str, sources: list[Document]) -> list[float]:
        """log P of each token of the answer (citations stripped) as the judge model's reply to the engine's
        grounded-answer task over the same sources: one forward pass for the prompt, then one a token."""
        reply = strip_citations(answer).strip()
        if not reply:
            raise ValueError("an empty answer has no likelihood to read")
        probe = probe_for(self.chat_generator)
        mark = probe.mark()
        logprobs = probe.continuation_logprobs(context_messages(sources[: self.max_sources], grounded_answer_task(question)), reply)
        record(**probe.usage_since(mark))
        return logprobs

    def faithfulness(self, question: str, answer: str, sources: list[Document]) -> tuple[float | None, str | None]:
        if FAITHFULNESS_TASKS[self.task] is not None:
            try:
                task = FAITHFULNESS_TASKS[self.task](question, answer)
                p_yes = yes_probability(self.chat_generator, context_messages(sources[: self.max_sources], task), step="judge")
                if self.task != LIKELIHOOD_TASK:
                    return p_yes, None
                logprobs = self.answer_logprobs(question, answer, sources)
                return p_yes * math.exp(sum(logprobs) / len(logprobs)), None
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
