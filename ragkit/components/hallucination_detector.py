"""HallucinationDetector: how well is an answer supported by the documents it was built from?

Two backends:

* ``"llm_judge"`` (offline default) — the local LLM gives P(supported) for each answer sentence.
  With llama.cpp the probability is read from the next-token distribution over yes/no
  (:class:`~ragkit.llm.probe.LlamaProbe`), and all sentences share one prompt prefix (system,
  sources, task), so after the first sentence each costs only its own ~30 tokens. With an
  OpenAI-compatible server the same P(yes) comes from its top log-probabilities of a one-token reply,
  one call a sentence (:func:`ragkit.llm.judgments.server_choice_probs`; llama-server reuses the
  prefix too). Where those are missing (a server that sends none, mocks) all sentences are judged in
  one constrained call returning a yes/no list, i.e. probabilities 0 or 1.
* ``"hhem"`` — Vectara's HHEM-2.1-Open classifier (premise = the documents, hypothesis = the
  answer), loaded without remote code by :mod:`ragkit.llm.hhem`; needs its weights in a local folder.

A small model's P(yes) is not calibrated, so the cut between supported and not is per model:
``support_threshold_for`` gives the threshold chosen on the calibration half of the labelled
SQuAD set and scored on its held-out half (``python bench/judge_squad.py`` →
bench/results/judge_squad.json); unknown models and HHEM use 0.5.

The answer-level score is the *lowest* sentence score — one unsupported sentence is enough to
flag an answer. A declined answer ("The documents don't say.") claims nothing and scores 1.0
without any call. A judge that fails returns ``score=None`` with the reason, never a made-up score.

``judge_spans=False`` (what the engine builds unless ``Features.judge_spans``): a grounded answer
(``mode="grounded"``) is a span copied from its evidence sentence, supported by construction, so it
is checked in microseconds — is it verbatim in the evidence? — instead of by the LLM; the score is
``None`` with ``hallucination["skipped"]`` saying why, and the confidence step uses the fit without
a judge's score. A span that is somehow not verbatim is judged as usual. Measured on 200 SQuAD dev
questions (bench/answer_quality.py): the judge changed no span answer (spans are not rewritten) and
cost ~0.3 s (0.5B) / ~0.6 s (1.5B) per question.

Usage::

    detector = HallucinationDetector(backend="llm_judge", chat_generator=llm, threshold=0.5)
    out = detector.run(replies=["Tesla was born in Smiljan [1]."], documents=docs)   # or a generator's replies
    out["score"], out["supported"], out["hallucination"]["sentences"]
"""

from __future__ import annotations

import re
from typing import Any, Literal, Optional, Union

from haystack import Document, component, default_from_dict, default_to_dict
from haystack.dataclasses import ChatMessage

from ragkit.llm.faults import check_deadline
from ragkit.llm.judgments import YES_NO_WORDS, server_choice_probs
from ragkit.llm.probe import LlamaProbe, probe_for
from ragkit.llm.prompts import NO_ANSWER, context_messages, reply_text
from ragkit.llm.structured import (
    backend_of, call_llm, gbnf_grammar, generator_from_dict, generator_to_dict, json_reply_max_tokens, llm_error,
)
from ragkit.pipeline.trace import record

DetectorBackend = Literal["llm_judge", "hhem"]
DEFAULT_SUPPORT_THRESHOLD = 0.5
# llm_judge thresholds per embedded model, from bench/results/judge_squad.json ("calibrated").
CALIBRATED_SUPPORT_THRESHOLDS: dict[str, float] = {
    "qwen2.5-coder-0.5b": 0.39,
    "qwen2.5-coder-1.5b": 0.56,
}
_CITATION = re.compile(r"\s*\[\d+(?:\s*,\s*\d+)*\]")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")


def support_threshold_for(backend: str, llm: str | None) -> float:
    """The support threshold calibrated for this judge (0.5 where none was measured)."""
    if backend == "llm_judge" and llm in CALIBRATED_SUPPORT_THRESHOLDS:
        return CALIBRATED_SUPPORT_THRESHOLDS[llm]
    return DEFAULT_SUPPORT_THRESHOLD


def split_sentences(answer: str) -> list[str]:
    text = _CITATION.sub("", answer).strip()
    return [s.strip() for s in _SENTENCE_END.split(text) if len(s.strip()) > 2]


def judge_task(sentence: str, question: str | None = None) -> str:
    asked = f"Question: {question}\n" if question else ""
    return f"{asked}Answer: {sentence}\nIs this answer stated in the sources or directly implied by them? Reply yes or no."


def judge_batch_task(sentences: list[str], question: str | None = None) -> str:
    asked = f"Question: {question}\n" if question else ""
    claims = "\n".join(f"{i}. {s}" for i, s in enumerate(sentences, 1))
    return (
        f"Task: for each of the {len(sentences)} claims, answer yes if the sources state or directly imply it, "
        f"no otherwise. Reply with a JSON list of {len(sentences)} strings, \"yes\" or \"no\".\n{asked}Claims:\n{claims}"
    )


def _copied(answer: str, documents: list[Document]) -> bool:
    """Whether the answer, citations stripped, stands verbatim in one of the documents."""
    span = " ".join(_CITATION.sub("", answer).split()).strip(" .")
    return bool(span) and any(span in " ".join((d.content or "").split()) for d in documents)


def _parse_yes_no_list(text: str, n: int) -> list[float]:
    import json

    values = json.loads(text.strip())
    if isinstance(values, dict):
        values = values.get("labels")
    if not isinstance(values, list) or len(values) != n or any(str(v).lower() not in ("yes", "no") for v in values):
        raise ValueError(f"expected {n} yes/no labels, got {text[:80]!r}")
    return [1.0 if str(v).lower() == "yes" else 0.0 for v in values]


def _yes_no_constraint(chat_generator: Any, n: int) -> dict[str, Any]:
    if backend_of(chat_generator) == "llama.cpp":
        items = ' "," '.join(["label"] * n)
        return {"grammar": gbnf_grammar(f'root ::= "[" {items} "]"\nlabel ::= "\\"yes\\"" | "\\"no\\""')}
    if backend_of(chat_generator) == "openai":
        schema = {"type": "object", "properties": {"labels": {"type": "array", "items": {"type": "string", "enum": ["yes", "no"]}, "minItems": n, "maxItems": n}}, "required": ["labels"], "additionalProperties": False}
        return {"response_format": {"type": "json_schema", "json_schema": {"name": "labels", "strict": True, "schema": schema}}}
    return {}


@component
class HallucinationDetector:
    def __init__(
        self,
        backend: DetectorBackend = "llm_judge",
        chat_generator: Any = None,
        hhem_model: str = "vectara/hallucination_evaluation_model",
        threshold: float = 0.5,
        max_chars_per_doc: int | None = None,
        judge_spans: bool = True,
    ):
        if backend not in ("llm_judge", "hhem"):
            raise ValueError(f"backend must be llm_judge or hhem, not {backend!r}")
        if backend == "llm_judge" and chat_generator is None:
            raise ValueError("the llm_judge backend needs a chat generator")
        self.backend = backend
        self.chat_generator = chat_generator
        self.hhem_model = hhem_model
        self.threshold = threshold
        self.max_chars_per_doc = max_chars_per_doc
        self.judge_spans = judge_spans
        self._probe = probe_for(chat_generator) if chat_generator is not None and LlamaProbe.supports(chat_generator) else None
        self._hhem = None

    def warm_up(self) -> None:
        if self.backend == "hhem" and self._hhem is None:
            from ragkit.llm.hhem import HHEMScorer

            self._hhem = HHEMScorer(self.hhem_model)
            self._hhem.warm_up()
        elif self.backend == "llm_judge" and hasattr(self.chat_generator, "warm_up"):
            self.chat_generator.warm_up()

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(
            self, backend=self.backend, chat_generator=generator_to_dict(self.chat_generator),
            hhem_model=self.hhem_model, threshold=self.threshold, max_chars_per_doc=self.max_chars_per_doc,
            judge_spans=self.judge_spans,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "HallucinationDetector":
        return default_from_dict(cls, generator_from_dict(data))

    def _judge(self, sentences: list[str], documents: list[Document], question: str | None, numbers: list[int] | None = None) -> tuple[list[float] | None, str | None]:
        if self._probe is not None:
            check_deadline()
            scores = []
            mark = self._probe.mark()
            for sentence in sentences:
                messages = context_messages(documents, judge_task(sentence, question), self.max_chars_per_doc, numbers)
                probs = self._probe.choice_probs(messages, YES_NO_WORDS)
                scores.append(probs["yes"])
            # one judge step = one call: every sentence is a forward pass over the same cached prefix
            # (no generation), and the passes are counted in the decision
            record(decision={"forward_passes": len(sentences)}, **self._probe.usage_since(mark))
            return scores, None
        if backend_of(self.chat_generator) == "openai":
            scores = []
            for sentence in sentences:
                messages = context_messages(documents, judge_task(sentence, question), self.max_chars_per_doc, numbers)
                try:
                    probs = server_choice_probs(self.chat_generator, messages, YES_NO_WORDS, step="hallucination")
                except RuntimeError as exc:  # the call failed: the reason, as a constrained reply's would be
                    return None, str(exc)
                if probs is None:  # no log-probabilities from this server: the one constrained call below
                    break
                scores.append(probs["yes"])
            else:
                return scores, None
        n = len(sentences)
        messages = context_messages(documents, judge_batch_task(sentences, question), self.max_chars_per_doc, numbers)
        kwargs = {**_yes_no_constraint(self.chat_generator, n), "max_tokens": json_reply_max_tokens(self.chat_generator, 6 * n + 4, items=n), "temperature": 0.0}
        reply = call_llm(self.chat_generator, messages, lambda text: _parse_yes_no_list(text, n), kwargs, step="hallucination")
        return (reply.value, None) if reply.ok else (None, reply.error)

    @component.output_types(score=Optional[float], supported=Optional[bool], hallucination=dict)
    def run(
        self, replies: Union[list[ChatMessage], list[str]], documents: list[Document], query: Optional[str] = None,
        evidence: Optional[list[Document]] = None, mode: Optional[str] = None,
    ) -> dict[str, Any]:
        """``replies``: the answer to check (a generator's replies; the first is judged). ``query``
        (optional) is shown to the judge: short answers ("1879.") are only checkable
        against what they answer. ``evidence``: the sentences a grounded answer was copied from; the
        judge then reads those, under their sources' numbers — the answer's own prompt, so llama.cpp
        reuses it and only the judging task is new. ``mode``: the answer mode; "grounded" with
        ``judge_spans=False`` checks that the span is verbatim instead of asking the LLM."""
        answer = reply_text(replies)
        info: dict[str, Any] = {"backend": self.backend, "threshold": self.threshold}
        if mode == "grounded" and not self.judge_spans and answer and answer.strip() != NO_ANSWER and _copied(answer, evidence or documents):
            info.update(skipped="a grounded span, copied verbatim from its evidence: supported by construction, not judged (judge_spans=False)")
            record(decision={"judged": "no: verbatim span"})
            return {"score": None, "supported": True, "hallucination": info}
        numbers = None
        if evidence:
            documents, numbers = evidence, [int(e.meta.get("cite", i)) for i, e in enumerate(evidence, 1)]
            info["judged_against"] = "evidence sentences"
        sentences = split_sentences(answer or "")
        if not sentences or answer.strip() == NO_ANSWER:
            info.update(sentences=[], note="the answer makes no claim")
            return {"score": 1.0, "supported": True, "hallucination": info}
        if not documents:
            info.update(sentences=[{"text": s, "p_supported": 0.0} for s in sentences], note="no documents to support it")
            return {"score": 0.0, "supported": False, "hallucination": info}
        try:
            self.warm_up()
            if self.backend == "hhem":
                premise = "\n\n".join(d.content or "" for d in documents)
                scores = self._hhem.score([(premise, s) for s in sentences])
                error = None
            else:
                scores, error = self._judge(sentences, documents, query, numbers)
        except Exception as exc:  # a judge that breaks must not take the answer down with it
            scores, error = None, llm_error(exc, self.chat_generator)
            record(fallback=f"hallucination: {error}")
        if scores is None:
            info.update(sentences=[{"text": s, "p_supported": None} for s in sentences], fallback=error)
            return {"score": None, "supported": None, "hallucination": info}
        score = min(scores)
        info["sentences"] = [{"text": s, "p_supported": round(p, 4)} for s, p in zip(sentences, scores)]
        record(decision={"support": round(score, 3)})
        return {"score": score, "supported": score >= self.threshold, "hallucination": info}
