"""SelfCorrectingAnswerer: answer, check the answer, and re-answer under a stricter prompt — one
bounded Haystack pipeline loop, wrapped as a ``SuperComponent``.

The engine's graph uses this component as its ``self_correction`` node, and it works alone in any
pipeline; there is no second copy of the loop. It is a ``SuperComponent`` (Haystack's
``@super_component``) because a loop must see the same sources on every pass: Haystack consumes a
component's output once, but keeps a sub-pipeline's own inputs for every pass. Inside::

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
because it arrives only from the loop. No documents: ``no_context``, before any LLM call.
Bounded by ``max_corrections``, with Haystack's ``max_runs_per_component`` as the backstop.

The loop's outputs are the last pass's: the answer's ``replies``, ``answer_ok`` and token
probabilities (``answer_tokens``, a confidence signal), the judge's ``support`` and per-sentence
``hallucination`` details, ``corrections`` made and the ``exit_reason``.

The prompt is :func:`ragkit.llm.prompts.answer_prompt_builder` — the same bytes
``context_messages`` gives the grader and the judge — so the sources are evaluated once per question
and reused from llama.cpp's cache.

Usage::

    corrector = SelfCorrectingAnswerer(chat_generator=llm, threshold=0.5, max_corrections=1)
    out = corrector.run(query="Where was Tesla born?", documents=docs)
    out["replies"][0].text, out["exit_reason"], out.get("corrections", 0), out["support"]
"""

from __future__ import annotations

from typing import Any, Optional

from haystack import Pipeline, SuperComponent, default_from_dict, default_to_dict, super_component
from haystack.components.converters import OutputAdapter
from haystack.components.routers import ConditionalRouter
from haystack.dataclasses import ChatMessage

from ragkit.components.guarded_generator import GuardedGenerator
from ragkit.components.hallucination_detector import HallucinationDetector
from ragkit.llm.prompts import NO_ANSWER, answer_prompt_builder
from ragkit.llm.structured import generator_from_dict, generator_to_dict

LOOP_OUTPUTS = {
    "answer.replies": "replies",
    "answer.ok": "answer_ok",
    "answer.tokens": "answer_tokens",
    "hallucination.score": "support",
    "hallucination.hallucination": "hallucination",
    "correction_router.exit_reason": "exit_reason",
    "correction_count.output": "corrections",
}
# The loop's own inputs, kept for every pass: the sources (the prompt, the grounded answer's span
# mask and the judge read them), a grounded answer's evidence sentences, the question, and the
# answer mode ("grounded" / "free").
LOOP_INPUTS = {
    "documents": ["answer_prompt.documents", "answer.documents", "hallucination.documents"],
    "evidence": ["answer_prompt.evidence", "answer.evidence", "hallucination.evidence"],
    "query": ["answer_prompt.query", "answer.query", "hallucination.query"],
    "mode": ["answer_prompt.mode", "answer.mode", "correction_router.mode", "hallucination.mode"],
    "streaming_callback": ["answer.streaming_callback"],  # each pass's answer streams; a retry's first chunk says start
}


def correction_routes(threshold: float, max_corrections: int) -> list[dict[str, Any]]:
    """Exits (an exit reason) or a retry with the attempt number and the answer to fall back on."""

    def done(reason: str) -> dict[str, Any]:
        return {"output": reason, "output_name": "exit_reason", "output_type": str}

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
        {"condition": "{{ true }}", "output": ["{{ (attempt or 0) + 1 }}", "{{ replies[0].text }}"], "output_name": ["retry", "previous_answer"], "output_type": [int, str]},
    ]


def build_correction_pipeline(chat_generator: Any, detector: HallucinationDetector, threshold: float, max_corrections: int, max_tokens: int = 256, answer_task: str | None = None) -> Pipeline:
    """The loop; its inputs are :data:`LOOP_INPUTS`, its outputs :data:`LOOP_OUTPUTS`."""
    pipe = Pipeline(max_runs_per_component=max_corrections + 2)
    pipe.add_component("answer_prompt", answer_prompt_builder(answer_task))
    pipe.add_component("answer", GuardedGenerator(chat_generator=chat_generator, max_tokens=max_tokens))
    pipe.add_component("hallucination", detector)
    pipe.add_component("correction_router", ConditionalRouter(routes=correction_routes(threshold, max_corrections), optional_variables=["attempt", "mode", "judged"]))
    pipe.add_component("correction_count", OutputAdapter(template="{{ attempt }}", output_type=int))
    pipe.connect("answer_prompt.prompt", "answer.messages")
    pipe.connect("answer.replies", "hallucination.replies")
    pipe.connect("answer.replies", "correction_router.replies")
    pipe.connect("hallucination.score", "correction_router.score")
    pipe.connect("hallucination.hallucination", "correction_router.judged")
    pipe.connect("correction_router.retry", "answer_prompt.attempt")
    pipe.connect("correction_router.previous_answer", "answer.fallback")
    pipe.connect("correction_router.retry", "correction_count.attempt")
    pipe.connect("correction_count.output", "correction_router.attempt")
    return pipe


def _no_context() -> dict[str, Any]:
    return {"replies": [ChatMessage.from_assistant(NO_ANSWER)], "answer_ok": True, "answer_tokens": {}, "support": None,
            "hallucination": {}, "exit_reason": "no_context", "corrections": 0}


@super_component
class SelfCorrectingAnswerer:
    """Inputs ``documents``, ``query`` (mandatory), ``mode``, ``evidence``; outputs :data:`LOOP_OUTPUTS`."""

    def __init__(
        self,
        chat_generator: Any,
        detector: Optional[HallucinationDetector] = None,
        threshold: float = 0.5,
        max_corrections: int = 1,
        max_tokens: int = 256,
        answer_task: Optional[str] = None,
    ):
        """``detector``: the judge (default: the same model as ``llm_judge``); ``answer_task``: a custom
        free-answer task with a ``{question}`` placeholder (``Features.step_prompts["answer"]``)."""
        if max_corrections < 0 or not 0.0 <= threshold <= 1.0:
            raise ValueError("max_corrections must be >= 0 and threshold in [0, 1]")
        self.chat_generator = chat_generator
        self.detector = detector if detector is not None else HallucinationDetector(backend="llm_judge", chat_generator=chat_generator, threshold=threshold)
        self.threshold, self.max_corrections, self.max_tokens, self.answer_task = threshold, max_corrections, max_tokens, answer_task
        self.pipeline = build_correction_pipeline(chat_generator, self.detector, threshold, max_corrections, max_tokens, answer_task)
        self.input_mapping = LOOP_INPUTS
        self.output_mapping = LOOP_OUTPUTS

    def run(self, **kwargs: Any) -> dict[str, Any]:
        if not kwargs.get("documents"):  # nothing to answer from: no LLM call
            return _no_context()
        return {"corrections": 0, **SuperComponent.run(self, **kwargs)}  # no retry: correction_count never ran

    async def run_async(self, **kwargs: Any) -> dict[str, Any]:
        if not kwargs.get("documents"):
            return _no_context()
        return {"corrections": 0, **await SuperComponent.run_async(self, **kwargs)}

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(
            self, chat_generator=generator_to_dict(self.chat_generator), detector=self.detector.to_dict(),
            threshold=self.threshold, max_corrections=self.max_corrections, max_tokens=self.max_tokens, answer_task=self.answer_task,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "SelfCorrectingAnswerer":
        params = data.get("init_parameters", {})
        if params.get("detector"):
            params["detector"] = HallucinationDetector.from_dict(params["detector"])
        return default_from_dict(cls, generator_from_dict(data))
