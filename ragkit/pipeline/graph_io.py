"""What a compiled graph takes from its caller and what the caller reads back — without the graph builder.

:func:`ragkit.pipeline.graph.build_pipeline` records in ``pipeline.metadata["ragkit"]["inputs"]`` which
sockets the caller fills (the question enters at several steps; ``answer_mode`` and ``collections``
only in some graphs), so an exported YAML can be run without ragkit's engine. This module reads that
record; it sits below the graph builder so a component that runs a graph of its own
(:class:`~ragkit.components.per_part.PerPartAnswerer`) can use it without importing the builder.

Usage::

    out = pipe.run(graph_inputs(pipe, "Where was Tesla born?"), include_outputs_from=outputs_of(pipe))
"""

from __future__ import annotations

from typing import Any

from haystack import Pipeline

# Steps whose outputs the result is read from (a step that is not in a given graph is ignored).
OUTPUTS = frozenset({
    "decompose", "per_part", "rewrite", "gate", "select", "intent", "expand", "multi_hop", "sql", "fallback", "router", "answer_mode", "hyde",
    "retrieve", "guard", "rerank", "grade", "context_check", "evidence", "answer", "self_correction", "confidence", "direct_answer",
    "follow_up", "clarify",
})
DEFAULT_TOP_K = 5


def outputs_of(pipe: Pipeline) -> set[str]:
    """The steps of ``pipe`` whose outputs :func:`ragkit.pipeline.result.result_from_outputs` reads."""
    return set(OUTPUTS & set(pipe.graph.nodes))


def graph_inputs(
    pipe: Pipeline, query: str, history: list | None = None, scope: dict | None = None, streaming_callback: Any = None,
) -> dict[str, dict[str, Any]]:
    """``Pipeline.run`` data for ``query``: every socket the graph leaves for the caller.

    ``history``: the conversation so far, as ``ChatMessage`` s (a graph with ``Features(follow_ups=True)``
    reads it); ``scope``: a filter the person chose (a clarification's answer), AND-ed with the graph's own;
    ``streaming_callback``: gets the answer's tokens as they are generated. Each goes only to the graph's
    sockets for it, and only when given."""
    meta = pipe.metadata.get("ragkit") or {}
    values = {
        "query": query, "top_k": meta.get("top_k", DEFAULT_TOP_K), "answer_mode": meta.get("answer_mode", "free"), "collections": meta.get("collections"),
        "history": history, "scope": scope, "streaming_callback": streaming_callback,
    }
    data: dict[str, dict[str, Any]] = {}
    for name, sockets in (meta.get("inputs") or {}).items():
        if name in ("history", "scope", "streaming_callback") and values[name] is None:
            continue  # optional sockets: left to their defaults
        for socket in sockets:
            component_name, input_name = socket.split(".", 1)
            data.setdefault(component_name, {})[input_name] = values[name]
    if meta.get("support_threshold") is not None:
        data.setdefault("confidence", {})["support_threshold"] = meta["support_threshold"]
    return data


def caller_sockets(pipe: Pipeline) -> list[str]:
    """Every ``component.socket`` the caller fills, for code that rewires the graph (custom steps)."""
    return [socket for sockets in ((pipe.metadata.get("ragkit") or {}).get("inputs") or {}).values() for socket in sockets]


def inner_pipeline(instance: Any) -> Pipeline | None:
    """The pipeline a step holds and runs itself (the self-correction loop, the per-part graph), if any."""
    inner = getattr(instance, "pipeline", None)
    return inner if isinstance(inner, Pipeline) else None


def walk_all(pipe: Pipeline) -> list[tuple[str, Any]]:
    """Every step of ``pipe`` and of the pipelines its steps hold, as ``(name, component)``."""
    steps = []
    for name, instance in pipe.walk():
        steps.append((name, instance))
        inner = inner_pipeline(instance)
        if inner is not None:
            steps += walk_all(inner)
    return steps
