"""PerPartAnswerer: the rest of the graph, once for each sub-question, and one answer that says which part is which.

After :class:`~ragkit.components.query_decomposer.QueryDecomposer` splits a question, each part needs
what a whole question gets — its own retrieval, evidence sentence, answer mode, judge and
confidence — so this component holds that per-question graph (a Haystack ``Pipeline`` built from the
same ``Features``, drawn inside this node as a subgraph) and runs it for every part. Haystack has no
"map a sub-pipeline over a list" node (``SuperComponent`` runs its pipeline once per call), hence this.

The merged answer attributes each part: one line per part, the part's question and its answer, with
the part's citations renumbered into the merged source list (a source two parts share is listed
once). A question that did not split runs the graph once and comes back unchanged. Confidence is the
chance that *every* part is right — the product of the parts' calibrated confidences (treated as
independent) — and each part keeps its own in ``parts``. A part that fails or declines stays on the
result as such; the other parts are still answered.

Usage::

    inner = build_pipeline(features_without_planning, chat_generator, index=index)
    answerer = PerPartAnswerer(pipeline=inner, features=features_without_planning.to_dict())
    out = answerer.run(parts=["Where was Tesla born?", "What did Tesla study?"], query="…", kind="multi")
    out["answer"], out["parts"][1]["answer"], out["documents"]
"""

from __future__ import annotations

import re
from typing import Any, Callable, Optional

from haystack import Document, Pipeline, component, default_from_dict, default_to_dict
from haystack.dataclasses import StreamingChunk

from ragkit.components.confidence import symbol
from ragkit.llm.prompts import NO_ANSWER
from ragkit.llm.streaming import labelled
from ragkit.pipeline.features import Features
from ragkit.pipeline.graph_io import graph_inputs, outputs_of
from ragkit.pipeline.result import AgenticResult, result_from_outputs
from ragkit.pipeline.trace import Trace, active_trace, record

_CITATION = re.compile(r"\[(\d+)\]")


def renumber(answer: str, sources: list[Document], merged: list[Document]) -> str:
    """``answer``'s citations [k] (into ``sources``) as citations into ``merged``."""
    position = {d.id: i for i, d in enumerate(merged, 1)}

    def swap(m: re.Match) -> str:
        k = int(m.group(1))
        return f"[{position[sources[k - 1].id]}]" if 0 < k <= len(sources) and sources[k - 1].id in position else m.group(0)

    return _CITATION.sub(swap, answer)


@component
class PerPartAnswerer:
    def __init__(self, pipeline: Pipeline, features: dict[str, Any] | None = None):
        """``pipeline``: the per-question graph (:func:`ragkit.pipeline.graph.build_pipeline` without the
        planning steps); ``features``: the ``Features`` it was built from (as a dict), to read its results."""
        self.pipeline = pipeline
        self.features = dict(features or {})

    def warm_up(self) -> None:
        self.pipeline.warm_up()

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, pipeline=self.pipeline.to_dict(), features=self.features)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "PerPartAnswerer":
        # the inner graph is ragkit's own components and Haystack's; nothing else is restored from it
        data["init_parameters"]["pipeline"] = Pipeline.from_dict(data["init_parameters"]["pipeline"], allowed_modules=["ragkit.*"])
        return default_from_dict(cls, data)

    def _answer(self, part: str, scope: Optional[dict] = None, streaming_callback: Optional[Callable] = None) -> AgenticResult:
        data = graph_inputs(self.pipeline, part, scope=scope, streaming_callback=streaming_callback)
        out = self.pipeline.run(data, include_outputs_from=outputs_of(self.pipeline))
        return result_from_outputs(part, out, active_trace() or Trace(), Features.from_dict(self.features))

    @component.output_types(answer=str, documents=list[Document], parts=list[dict], confidence=float, symbol=str, declined=bool)
    def run(
        self, parts: list[str], query: Optional[str] = None, kind: Optional[str] = None, scope: Optional[dict] = None,
        streaming_callback: Optional[Callable[[StreamingChunk], None]] = None,
    ) -> dict[str, Any]:
        """``kind``: the decomposer's ("multi", "comparison", "single"); ``query``: the whole question;
        ``scope``: the caller's chosen scope (a source filter), for every part; ``streaming_callback``: each part's answer tokens,
        ``meta["part"]`` naming the part ("1/2: Where was Tesla born?")."""
        parts = [p for p in parts if p and p.strip()] or ([query] if query else [])
        results = []
        for i, part in enumerate(parts, 1):
            record(decision={f"part {i}": part[:80]})
            results.append(self._answer(part, scope, labelled(streaming_callback, f"{i}/{len(parts)}: {part}")))
        merged: list[Document] = []
        for r in results:
            merged += [d for d in r.sources if d.id not in {m.id for m in merged}]
        if len(results) == 1:
            r = results[0]
            answer = r.answer
        else:
            answer = "\n".join(f"{r.question} {renumber(r.answer, r.sources, merged)}" for r in results)
        answered = [r for r in results if not r.declined and not r.failed]
        confidence = 1.0
        for r in results:
            confidence *= (r.confidence or 0.0) if r in answered else 0.0
        summary = [{
            "question": r.question, "answer": renumber(r.answer, r.sources, merged) if len(results) > 1 else r.answer, "confidence": r.confidence,
            "symbol": r.symbol, "declined": r.declined, "failed": r.failed, "route": r.route, "answer_mode": r.answer_mode, "exit_reason": r.exit_reason,
            "sources": [d.id for d in r.sources], "evidence": r.evidence, "corrections": r.corrections,
            # the part's planning steps (hops made, fallbacks tried): a budget check reads them per part
            "details": {k: r.details[k] for k in ("multi_hop", "fallback") if k in r.details},
        } for r in results]
        record(decision={"parts answered": f"{len(answered)}/{len(results)}", "kind": kind or "single"})
        return {
            "answer": answer if results else NO_ANSWER, "documents": merged, "parts": summary, "confidence": confidence if results else 0.0,
            "symbol": symbol(confidence if results else 0.0), "declined": not answered,
        }
