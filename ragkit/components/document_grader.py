"""DocumentGrader: score every retrieved chunk 0–10 for relevance and drop those under a threshold.

``backend="llm"`` grades the whole batch in ONE call (naive agentic RAG grades chunk by chunk: one
call per chunk). The chunks sit in the shared sources prefix (see :mod:`ragkit.llm.prompts`) so the
answering call that follows reuses llama.cpp's cache, and a grammar forces the reply to be exactly
``[s1,s2,…]`` with one integer 0–10 per chunk; with llama.cpp the same greedy choice is read from
the logits of the allowed tokens (:meth:`~ragkit.llm.probe.LlamaProbe.score_list`), a little
cheaper than its grammar sampler and unable to produce anything but a valid list. ``backend="embedding"`` needs no LLM: the cosine
similarity between question and chunk, mapped linearly onto 0–10 (``cosine * 10``, clipped).

A reply that cannot be parsed keeps every chunk and says so (``grading["fallback"]``); grading
never empties the context by accident. Set ``min_keep`` to always keep the best few.

Usage::

    grader = DocumentGrader(backend="llm", chat_generator=llm, threshold=4)
    out = grader.run(query="Where was Tesla born?", documents=docs)
    out["documents"], out["grading"]["scores"], out["grading"]["dropped"]
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal, Optional

import numpy as np
from haystack import Document, component, default_from_dict, default_to_dict

from ragkit.llm.probe import LlamaProbe, probe_for
from ragkit.llm.prompts import context_messages
from ragkit.llm.faults import check_deadline
from ragkit.llm.structured import (
    call_llm, generator_from_dict, generator_to_dict, int_list_constraint, json_reply_max_tokens, llm_error, parse_int_list,
)
from ragkit.pipeline.trace import record

GraderBackend = Literal["llm", "embedding"]


def grade_task(question: str, n: int) -> str:
    return (
        f"Task: rate how useful each of the {n} sources is for answering the question, from 0 (unrelated) to "
        f"10 (directly answers it). Reply with a JSON list of {n} integers in source order, nothing else.\n"
        f"Question: {question}"
    )


@component
class DocumentGrader:
    def __init__(
        self,
        backend: GraderBackend = "llm",
        chat_generator: Any = None,
        threshold: float = 4.0,
        min_keep: int = 1,
        embedder_model: str = "all-MiniLM-L6-v2",
        max_chars_per_doc: int | None = None,
        prompt: str | None = None,
    ):
        if backend not in ("llm", "embedding"):
            raise ValueError(f"backend must be llm or embedding, not {backend!r}")
        if backend == "llm" and chat_generator is None:
            raise ValueError("the llm backend needs a chat generator")
        self.backend = backend
        self.chat_generator = chat_generator
        self.threshold = threshold
        self.min_keep = min_keep
        self.embedder_model = embedder_model
        self.max_chars_per_doc = max_chars_per_doc
        if prompt is not None and "{question}" not in prompt:
            raise ValueError("a custom grading task needs a {question} placeholder (and may use {n}, the number of sources)")
        self.prompt = prompt  # the task after the sources (grade_task when None); the reply is still n grades
        self._embedder = None
        self._probe = probe_for(chat_generator) if chat_generator is not None and LlamaProbe.supports(chat_generator) else None

    def warm_up(self) -> None:
        if self.backend == "embedding":
            self._embedding_model()
        if self.backend == "llm" and hasattr(self.chat_generator, "warm_up"):
            self.chat_generator.warm_up()

    def _embedding_model(self):
        """The shared text embedder, loaded on first use (also when a route's policy picks the embedding
        grader for a question while the configured backend is the LLM)."""
        if self._embedder is None:
            from ragkit.llm.generators import shared_text_embedder

            self._embedder = shared_text_embedder(self.embedder_model)
        return self._embedder.embedding_backend

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(
            self, backend=self.backend, chat_generator=generator_to_dict(self.chat_generator),
            threshold=self.threshold, min_keep=self.min_keep, embedder_model=self.embedder_model,
            max_chars_per_doc=self.max_chars_per_doc, prompt=self.prompt,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "DocumentGrader":
        return default_from_dict(cls, generator_from_dict(data))

    def _llm_scores(self, query: str, documents: list[Document]) -> tuple[list[float] | None, str | None]:
        n = len(documents)
        task = self.prompt.replace("{question}", query).replace("{n}", str(n)) if self.prompt else grade_task(query, n)
        messages = context_messages(documents, task, self.max_chars_per_doc)
        if self._probe is not None:
            return self._probe_scores(messages, n)
        kwargs = {**int_list_constraint(self.chat_generator, n), "max_tokens": json_reply_max_tokens(self.chat_generator, 4 * n + 4, items=n), "temperature": 0.0}
        reply = call_llm(self.chat_generator, messages, lambda text: parse_int_list(text, n), kwargs, step="grader")
        return (list(map(float, reply.value)), None) if reply.ok else (None, reply.error)

    def _probe_scores(self, messages: list, n: int) -> tuple[list[float] | None, str | None]:
        mark = self._probe.mark()
        try:
            check_deadline()
            out = self._probe.score_list(messages, n)
        except Exception as exc:  # a context overflow, a broken model or the deadline degrades like any LLM failure
            error = llm_error(exc, self.chat_generator)
            record(llm_calls=1, fallback=f"grader: {error}", error=error)
            return None, error
        calls = {k: v for k, v in self._probe.usage_since(mark).items() if k in ("llm_calls", "cache_hits", "cache_seconds")}  # an LLM call, or a cache hit
        record(**calls, prompt_tokens=out["prompt_tokens"], prompt_tokens_reused=out["prompt_tokens_reused"], completion_tokens=out["reply_tokens"])
        return list(map(float, out["scores"])), None

    def _embedding_scores(self, query: str, documents: list[Document]) -> list[float]:
        model = self._embedding_model()
        vectors = np.asarray(model.embed([query] + [d.content or "" for d in documents], normalize_embeddings=True, show_progress_bar=False))
        cosines = vectors[1:] @ vectors[0]
        return [float(np.clip(c * 10.0, 0.0, 10.0)) for c in cosines]

    @component.output_types(documents=list[Document], grading=dict)
    def run(self, query: str, documents: list[Document], threshold: float | None = None, backend: Optional[str] = None) -> dict[str, Any]:
        """``backend``: this question's grader ("embedding" or "off" on a route whose policy caps it
        there, ``Features.route_policy``), else the configured one. "off" passes every chunk on, ungraded."""
        threshold = self.threshold if threshold is None else threshold
        backend = backend or self.backend
        if backend == "off":
            record(decision={"kept": len(documents), "graded": "no (the route's policy)"})
            return {"documents": list(documents), "grading": {"backend": "off", "threshold": threshold, "scores": [], "dropped": []}}
        if backend not in ("llm", "embedding") or (backend == "llm" and self.chat_generator is None):
            record(fallback=f"grader: backend {backend!r} unavailable here, graded by {self.backend}")
            backend = self.backend
        grading: dict[str, Any] = {"backend": backend, "threshold": threshold}
        if not documents:
            return {"documents": [], "grading": {**grading, "scores": [], "dropped": []}}
        self.warm_up()
        if backend == "llm":
            scores, error = self._llm_scores(query, documents)
            if scores is None:
                grading.update(scores=[None] * len(documents), dropped=[], fallback=error)
                record(decision={"kept": len(documents), "dropped": 0})
                return {"documents": list(documents), "grading": grading}
        else:
            scores = self._embedding_scores(query, documents)
        order = sorted(range(len(documents)), key=lambda i: scores[i], reverse=True)
        keep = {i for i in range(len(documents)) if scores[i] >= threshold} | set(order[: self.min_keep])
        kept = [replace(documents[i], meta={**documents[i].meta, "grade": scores[i]}) for i in range(len(documents)) if i in keep]
        dropped = [{"id": documents[i].id, "source": documents[i].meta.get("source"), "grade": scores[i]} for i in range(len(documents)) if i not in keep]
        grading.update(scores=[round(s, 2) for s in scores], dropped=dropped)
        # grades on the 0–10 scale of the threshold, written out so the trace cannot be read as 0–1
        record(decision={"kept": len(kept), "dropped": len(dropped), "threshold": f"{threshold:g}/10", "grades": " ".join(f"{s:g}/10" for s in scores)})
        return {"documents": kept, "grading": grading}
