"""SelfCorrectingAnswerer: answer, check the answer, and re-answer under a stricter prompt — a
bounded Haystack pipeline loop.

The loop is an ordinary Haystack ``Pipeline`` with a cycle (the engine's graph embeds the same loop
as a ``SuperComponent``, :func:`correction_loop`, so the sources stay fixed across retries: Haystack
consumes a component's output once, but keeps a sub-pipeline's own inputs for every pass)::

    answer_prompt (ChatPromptBuilder) → answer (GuardedGenerator) → hallucination (HallucinationDetector)
          ↑                                   ↑                         ↓
          └──────────── retry ────────────────┴──────── correction_router (ConditionalRouter)
                                                              ↕ correction_count (OutputAdapter)

``correction_router`` ends the loop with an exit reason — ``supported`` (score ≥ threshold),
``max_corrections`` (the bound), ``unknown`` (the judge could not score), ``unsupported_span`` (a
grounded span the judge doubts: spans are not rewritten, see :func:`correction_routes`), ``span_copied``
(a grounded span the detector did not send to the judge, ``judge_spans=False``) — or sends ``retry`` with
the attempt number back to the prompt builder, whose template then switches to the strict task
("use only facts stated in the sources; say what they don't cover"), and the previous answer to
the generator as its fallback. Haystack cannot connect a component to itself, so the attempt
number reaches the router again through ``correction_count``. The prompt builder names its
``required_variables`` explicitly (Haystack 3 needs it for loop inputs); ``attempt`` stays optional
because it arrives only from the loop. ``no_context`` (no documents) exits before any LLM call.

The prompt is :func:`ragkit.llm.prompts.answer_prompt_builder` — the same bytes
``context_messages`` gives the grader and the judge — so the sources are evaluated once per question
and reused from llama.cpp's cache. The answer's status (``answer_ok``) and token probabilities pass
through the router to the confidence step.

Usage::

    corrector = SelfCorrectingAnswerer(generator=llm, threshold=0.5, max_corrections=1)
    out = corrector.run(question="Where was Tesla born?", documents=docs)
    out["answer"], out["exit_reason"], out["corrections"], out["support"]
"""

from __future__ import annotations

from typing import Any, Optional

from haystack import Document, Pipeline, SuperComponent, component, default_from_dict, default_to_dict
from haystack.components.converters import OutputAdapter
from haystack.components.routers import ConditionalRouter

from ragkit.components.guarded_generator import GuardedGenerator
from ragkit.components.hallucination_detector import HallucinationDetector
from ragkit.llm.prompts import NO_ANSWER, answer_prompt_builder
from ragkit.llm.structured import generator_from_dict, generator_to_dict

LOOP_OUTPUTS = {
    "correction_router.exit_reason": "exit_reason",
    "correction_router.answer": "answer",
    "correction_router.support": "support",
    "correction_router.answer_ok": "answer_ok",
    "correction_router.answer_tokens": "answer_tokens",
    "correction_count.output": "corrections",
    "hallucination.hallucination": "hallucination",
}


def correction_routes(threshold: float, max_corrections: int) -> list[dict[str, Any]]:
    """Exits (supported / unknown / max_corrections) or a retry with the attempt number."""
    names = ["exit_reason", "answer", "support", "answer_ok", "answer_tokens"]
    types = [str, str, Optional[float], bool, dict]

    def done(reason: str) -> dict[str, Any]:
        return {"output": [reason, "{{ answer }}", "{{ score }}", "{{ answer_ok }}", "{{ answer_tokens }}"], "output_name": names, "output_type": types}

    return [
        {"condition": "{{ score is none and 'skipped' in (judged or {}) }}", **done("span_copied")},
        {"condition": "{{ score is none }}", **done("unknown")},
        {"condition": f"{{{{ score >= {float(threshold)!r} }}}}", **done("supported")},
        # a copied span is judged but not rewritten: a retry could only take another span of the same
        # evidence sentence, and on development questions the 0.5B's retries turned a right span into a
        # wrong one more often than the reverse (bench/evidence_dev.py); the judge's score still lowers
        # the confidence
        {"condition": "{{ mode == 'grounded' }}", **done("unsupported_span")},
        {"condition": f"{{{{ (attempt or 0) >= {int(max_corrections)} }}}}", **done("max_corrections")},
        {"condition": "{{ true }}", "output": ["{{ (attempt or 0) + 1 }}", "{{ answer }}"], "output_name": ["retry", "previous_answer"], "output_type": [int, str]},
    ]


def build_correction_pipeline(generator: Any, detector: HallucinationDetector, threshold: float, max_corrections: int, max_tokens: int = 256, answer_task: str | None = None) -> Pipeline:
    """Inputs: ``answer_prompt`` and ``hallucination`` each take ``documents`` and ``question``."""
    pipe = Pipeline(max_runs_per_component=max_corrections + 2)
    pipe.add_component("answer_prompt", answer_prompt_builder(answer_task))
    pipe.add_component("answer", GuardedGenerator(generator=generator, max_tokens=max_tokens))
    pipe.add_component("hallucination", detector)
    pipe.add_component("correction_router", ConditionalRouter(routes=correction_routes(threshold, max_corrections), optional_variables=["attempt", "mode", "judged"]))
    pipe.add_component("correction_count", OutputAdapter(template="{{ attempt }}", output_type=int))
    pipe.connect("answer_prompt.prompt", "answer.messages")
    pipe.connect("answer.text", "hallucination.answer")
    pipe.connect("answer.text", "correction_router.answer")
    pipe.connect("answer.ok", "correction_router.answer_ok")
    pipe.connect("answer.tokens", "correction_router.answer_tokens")
    pipe.connect("hallucination.score", "correction_router.score")
    pipe.connect("hallucination.hallucination", "correction_router.judged")
    pipe.connect("correction_router.retry", "answer_prompt.attempt")
    pipe.connect("correction_router.previous_answer", "answer.fallback")
    pipe.connect("correction_router.retry", "correction_count.attempt")
    pipe.connect("correction_count.output", "correction_router.attempt")
    return pipe


# The loop's own inputs, kept for every pass: the sources (the prompt, the grounded answer's span
# mask and the judge read them), the question, and the answer mode ("grounded" / "free").
LOOP_INPUTS = {
    "documents": ["answer_prompt.documents", "answer.documents", "hallucination.documents"],
    # a grounded answer's evidence sentences: the prompt, the span mask and the judge read them
    "evidence": ["answer_prompt.evidence", "answer.evidence", "hallucination.evidence"],
    "question": ["answer_prompt.question", "answer.question", "hallucination.question"],
    "mode": ["answer_prompt.mode", "answer.mode", "correction_router.mode", "hallucination.mode"],
}


def correction_loop(generator: Any, detector: HallucinationDetector, threshold: float, max_corrections: int, max_tokens: int = 256, answer_task: str | None = None) -> SuperComponent:
    """The loop as one node of a bigger graph: inputs ``documents``, ``question``, ``mode``; outputs :data:`LOOP_OUTPUTS`."""
    return SuperComponent(
        pipeline=build_correction_pipeline(generator, detector, threshold, max_corrections, max_tokens, answer_task),
        input_mapping=LOOP_INPUTS,
        output_mapping=LOOP_OUTPUTS,
    )


@component
class SelfCorrectingAnswerer:
    def __init__(
        self,
        generator: Any,
        detector: Optional[HallucinationDetector] = None,
        threshold: float = 0.5,
        max_corrections: int = 1,
        max_tokens: int = 256,
    ):
        if max_corrections < 0 or not 0.0 <= threshold <= 1.0:
            raise ValueError("max_corrections must be >= 0 and threshold in [0, 1]")
        self.generator = generator
        self.detector = detector if detector is not None else HallucinationDetector(backend="llm_judge", generator=generator, threshold=threshold)
        self.threshold = threshold
        self.max_corrections = max_corrections
        self.max_tokens = max_tokens
        self.pipeline = build_correction_pipeline(generator, self.detector, threshold, max_corrections, max_tokens)

    def warm_up(self) -> None:
        self.pipeline.warm_up()

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(
            self, generator=generator_to_dict(self.generator), detector=self.detector.to_dict(),
            threshold=self.threshold, max_corrections=self.max_corrections, max_tokens=self.max_tokens,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "SelfCorrectingAnswerer":
        params = data.get("init_parameters", {})
        if params.get("detector"):
            params["detector"] = HallucinationDetector.from_dict(params["detector"])
        return default_from_dict(cls, generator_from_dict(data))

    @component.output_types(answer=str, exit_reason=str, corrections=int, support=Optional[float], hallucination=dict)
    def run(self, question: str, documents: list[Document], mode: Optional[str] = None, evidence: Optional[list[Document]] = None) -> dict[str, Any]:
        """``mode``: "grounded" (a span of the sources) or "free" (the default); ``evidence``: the sentences
        a grounded answer copies from (:class:`~ragkit.components.evidence_selector.EvidenceSelector`)."""
        if not documents:
            return {"answer": NO_ANSWER, "exit_reason": "no_context", "corrections": 0, "support": None, "hallucination": {}}
        inputs = {"documents": documents, "question": question, "evidence": evidence or []}
        data = {"answer_prompt": {**inputs, "mode": mode or "free"}, "answer": {**inputs, "mode": mode or "free"}, "hallucination": {**inputs, "mode": mode or "free"},
                "correction_router": {"mode": mode or "free"}}
        out = self.pipeline.run(data, include_outputs_from={"hallucination", "correction_count"})
        judged = out.get("hallucination", {})
        return {
            "answer": out["correction_router"]["answer"],
            "exit_reason": out["correction_router"]["exit_reason"],
            "corrections": int(out.get("correction_count", {}).get("output", 0) or 0),
            "support": judged.get("score"),
            "hallucination": judged.get("hallucination", {}),
        }
