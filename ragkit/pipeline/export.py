"""Take the engine away: a ``Features`` graph as Haystack YAML, loaded back and run without ragkit's engine.

``export_yaml`` writes what ``Pipeline.dumps()`` writes for the graph :mod:`ragkit.pipeline.graph`
builds — every component with its init parameters (the LLM as its GGUF path or endpoint, the index
as its folder), every connection, and ``metadata.ragkit`` naming the inputs the caller fills.
``load_exported`` restores it with Haystack's allowlist limited to ragkit's modules (Haystack's own
are always allowed); ``run_exported`` asks it one question and reads the answer and sources the way
the engine does.

The LLM steps share one generator: every component's serialized generator is the same dict, and
:func:`ragkit.llm.structured.generator_from_dict` gives identical dicts one instance per process,
so the loaded pipeline loads the model once and keeps llama.cpp's prompt cache shared between steps.

Usage::

    text = export_yaml(Features.all_on(), ".ragkit/index", RagConfig())
    pipe = load_exported(text)
    run_exported(pipe, "Where was Nikola Tesla born?")["answer"]
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from haystack import Pipeline

from ragkit.config import RagConfig
from ragkit.index.retrieval import check_query
from ragkit.llm.faults import question_deadline
from ragkit.llm.generators import build_chat_generator
from ragkit.pipeline.features import Features
from ragkit.pipeline.graph import OUTPUTS, build_pipeline, graph_inputs
from ragkit.pipeline.result import failed_result, result_from_outputs
from ragkit.pipeline.trace import RagkitTracer

ALLOWED_MODULES = ["ragkit.*"]


def export_yaml(features: Features, index_dir: str | Path, config: RagConfig | None = None, generator: Any = None) -> str:
    config = config or RagConfig()
    generator = generator if generator is not None else build_chat_generator(config.models)
    return build_pipeline(features, generator, index_path=str(Path(index_dir).resolve()), config=config).dumps()


def load_exported(text_or_path: str | Path) -> Pipeline:
    text = Path(text_or_path).read_text(encoding="utf-8") if isinstance(text_or_path, Path) or (isinstance(text_or_path, str) and "\n" not in text_or_path) else text_or_path
    pipe = Pipeline.loads(text, allowed_modules=ALLOWED_MODULES)
    if "ragkit" not in pipe.metadata:
        raise ValueError("not a ragkit pipeline: its metadata has no 'ragkit' section naming the question inputs")
    return pipe


def run_exported(pipe: Pipeline, question: str) -> dict[str, Any]:
    """Ask an exported pipeline one question: answer, sources, confidence, exit reason, trace rows."""
    features = Features.from_dict(pipe.metadata["ragkit"]["features"])
    question = check_query(question)
    deadline = float(os.environ.get("RAGKIT_DEADLINE_S") or pipe.metadata["ragkit"].get("deadline_s") or 0)
    with RagkitTracer().collect() as trace, question_deadline(deadline):
        try:
            out = pipe.run(graph_inputs(pipe, question), include_outputs_from=OUTPUTS & set(pipe.graph.nodes))
        except Exception as exc:  # the graph broke: an explicit failed result, as AgenticRAG.ask gives
            result = failed_result(question, trace, exc)
        else:
            result = result_from_outputs(question, out, trace, features)
    return {
        "answer": result.answer,
        "sources": [{"id": d.id, "source": d.meta.get("source"), "score": d.score} for d in result.sources],
        "confidence": result.confidence,
        "symbol": result.symbol,
        "route": result.route,
        "exit_reason": result.exit_reason,
        "failed": result.failed,
        "error": result.error,
        "failed_steps": result.failed_steps,
        "warnings": result.warnings,
        "trace": trace.table(),
    }
