"""Draw the graph a :class:`~ragkit.pipeline.features.Features` config compiles to, without loading anything.

The graph is built with :class:`DrawingOnlyLLM` in place of the model and a placeholder index path,
so drawing costs milliseconds and never touches a model, an index or the network; the picture is
:func:`ragkit.pipeline.mermaid.to_mermaid` of the same graph the engine runs.

Usage::

    print(draw(Features(grading=True)))                  # Mermaid text; JupyterLab renders it
    draw(Features.all_on(), detail=True)                 # also open the self-correction loop and the per-part graph
"""

from __future__ import annotations

from typing import Any

from ragkit.config import RagConfig
from ragkit.pipeline.features import Features
from ragkit.pipeline.graph import build_pipeline
from ragkit.pipeline.mermaid import to_mermaid


TITLE_CHARS = 70


class DrawingOnlyLLM:
    """Stands in for the LLM when a graph is only drawn: nothing is loaded, nothing is called."""

    def to_dict(self) -> dict[str, Any]:
        return {"type": f"{__name__}.DrawingOnlyLLM", "init_parameters": {}}

    def run(self, messages, **kwargs):  # pragma: no cover - a drawing never runs
        raise RuntimeError("the drawing-only LLM cannot answer")


TOGGLES = ("rewrite", "gate", "decompose", "expand", "intent_filters", "multi_hop", "fallback", "sql_route", "routing", "hyde", "rerank", "grading",
           "hallucination_check", "self_correction")


def features_label(features: Features, max_chars: int | None = None) -> str:
    """"plain RAG", or the toggles that are on; past ``max_chars``, how many (the drawing's title must
    not be wider than the graph)."""
    on = [name for name in TOGGLES if getattr(features, name)]
    label = "plain RAG" if not on else " + ".join(on)
    return label if max_chars is None or len(label) <= max_chars else f"{len(on)} features on"


def draw(features: Features, config: RagConfig | None = None, detail: bool = False) -> str:
    """The Mermaid text of the graph ``features`` compile to, without loading any model or index;
    ``detail=True`` also opens the steps that hold a pipeline of their own (:mod:`ragkit.pipeline.mermaid`)."""
    return to_mermaid(build_pipeline(features, DrawingOnlyLLM(), index_path="(drawing)", config=config), title=features_label(features, TITLE_CHARS), detail=detail)
