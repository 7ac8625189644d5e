"""``AgenticRAG``: one engine — a :class:`~ragkit.pipeline.features.Features` config compiled to a
Haystack ``Pipeline`` (:mod:`ragkit.pipeline.graph`) and run with a trace of every step.

Plain RAG is ``Features()`` through the same engine. The graph a learner draws
(:meth:`AgenticRAG.mermaid`), exports (:meth:`AgenticRAG.to_yaml`) or serves is the graph that
answers. Two things stay outside the graph, on purpose:

* checking the question (empty / too long) raises before anything runs — a caller error, not a step;
* the bi-encoder reranker's one-time sentence vectors (``sentence_vectors``): preparation per
  index, not per question, so it is its own traced step before the first reranked question and
  never hides inside one question's latency.

A component that raises (rather than degrading as ragkit's components do) stops the graph; the
result then says ``pipeline_error`` with confidence 0 instead of crashing the notebook or CLI.

:meth:`AgenticRAG.pause_before` stops a question just before a step and returns that step's inputs
(the exact prompt, the documents). It stops through ragkit's tracer, when Haystack hands the step
its inputs, rather than through a Haystack ``Breakpoint``: a breakpoint stops at the same place but
gives the inputs only serialized inside its snapshot, and Haystack has no public function that
turns them back into chat messages and documents. It also reaches steps inside the
self-correction loop (``answer``, ``hallucination``), which an outer breakpoint cannot name.

Without a ``config``, ``RagConfig()`` — the defaults with any ``RAGKIT_*`` environment variable in
their place, as the CLI reads them.

Usage::

    rag = AgenticRAG(Features(grading=True, hallucination_check=True), index_dir=".ragkit/index")
    result = rag.ask("How does lru_cache differ from cache?")
    result.answer, result.confidence, result.symbol, result.route, result.trace.table()
    rag.mermaid()            # the graph, drawn offline by JupyterLab
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from typing import Callable

from haystack import Pipeline, tracing
from haystack.dataclasses import ChatMessage, StreamingChunk

from ragkit.components.reranker import Reranker
from ragkit.config import RagConfig
from ragkit.index.retrieval import check_query
from ragkit.index.sentence_vectors import SentenceVectorCache
from ragkit.index.store import RagIndex
from ragkit.index.stores import index_location, load_index
from ragkit.llm.faults import question_deadline
from ragkit.llm.generators import build_chat_generator
from ragkit.pipeline.custom_steps import replace_steps as replace_steps_in
from ragkit.pipeline.features import Features
from ragkit.pipeline.drawing import TITLE_CHARS, features_label
from ragkit.pipeline.export import dump_yaml
from ragkit.pipeline.graph import build_pipeline, support_threshold
from ragkit.pipeline.graph_io import caller_sockets, graph_inputs, outputs_of, walk_all
from ragkit.pipeline.mermaid import mermaid_markdown, to_mermaid
from ragkit.pipeline.result import AgenticResult, failed_result, result_from_outputs
from ragkit.pipeline.trace import RagkitTracer, StepReached

__all__ = ["AgenticRAG", "AgenticResult", "Paused"]


class Paused:
    """A question stopped before a step: that step's inputs, as the pipeline assembled them."""

    def __init__(self, step: str, inputs: dict[str, Any], trace):
        self.step, self.inputs, self.trace = step, inputs, trace

    def prompt_text(self) -> str:
        """The chat messages the step was about to send, as plain text (for a prompt-taking step)."""
        messages = self.inputs.get("messages") or self.inputs.get("prompt") or []
        return "\n\n".join(f"[{m.role.value}]\n{m.text}" for m in messages)

    def __repr__(self) -> str:
        return f"Paused(before={self.step!r}, inputs={sorted(self.inputs)})"


class AgenticRAG:
    def __init__(
        self, features: Features | None = None, index_dir: str | Path = ".ragkit/index", config: RagConfig | None = None, chat_generator: Any = None,
        index: RagIndex | None = None, step_generators: dict[str, Any] | None = None, replace_steps: dict[str, Any] | None = None,
    ):
        """``chat_generator``: the LLM every step uses (default: the one ``config.models`` names);
        ``step_generators``: a generator per LLM step (else one per ``Features.step_models`` model, loaded
        once each); ``replace_steps``: a function or component per step name (:mod:`ragkit.pipeline.custom_steps`)."""
        self.features = (features or Features()).validate()
        self.config = config or RagConfig()
        self.index = index if index is not None else load_index(self.config.store or index_dir, expected_embedder=self.config.models.embedder)
        self.chat_generator = chat_generator if chat_generator is not None else build_chat_generator(self.config.models)
        self.step_generators = dict(step_generators or {})
        by_model: dict[str, Any] = {self.config.models.llm: self.chat_generator}
        for step, model in self.features.step_models.items():
            if step not in self.step_generators:  # one generator (one loaded model, one prompt cache) per model name
                if model not in by_model:
                    by_model[model] = build_chat_generator(replace(self.config.models, llm=model))
                self.step_generators[step] = by_model[model]
        self.tracer = RagkitTracer()
        self.pipeline: Pipeline = build_pipeline(
            self.features, self.chat_generator, index=self.index, index_path=index_location(self.index), config=self.config,
            step_generators=self.step_generators,
        )
        if replace_steps:
            replace_steps_in(self.pipeline, replace_steps, caller_sockets=caller_sockets(self.pipeline))
        self._sentence_vectors_ready = False

    @property
    def support_threshold(self) -> float:
        """The hallucination check's cut: the configured one, else the judge's calibrated one."""
        return support_threshold(self.features, self.config.models)

    @property
    def retriever(self):
        """The hybrid retriever the graph's ``retrieve`` step uses (for embedding and direct retrieval)."""
        step = self.pipeline.get_component("retrieve")
        step.warm_up()
        return step._retriever

    # -- seeing and taking away the graph ----------------------------------------------------------
    def mermaid(self, detail: bool = False) -> str:
        """The running graph as Mermaid text (JupyterLab renders it; nothing is sent anywhere); ``detail``
        opens the self-correction loop and labels every arrow with its sockets."""
        return to_mermaid(self.pipeline, title=features_label(self.features, TITLE_CHARS), detail=detail)

    def show_graph(self, detail: bool = False):
        """Display the running graph in a notebook (a ``mermaid`` block JupyterLab draws itself)."""
        from IPython.display import Markdown

        return Markdown(mermaid_markdown(self.pipeline, title=features_label(self.features, TITLE_CHARS), detail=detail))

    def to_yaml(self) -> str:
        """Haystack YAML of the graph, portable to another machine (:func:`ragkit.pipeline.export.dump_yaml`;
        :func:`ragkit.pipeline.export.load_exported` restores it)."""
        return dump_yaml(self.pipeline)

    # -- one-time preparation ----------------------------------------------------------------------
    def prepare_one_time(self) -> dict[str, float]:
        """Do the one-time work now, before a question is timed; returns what ran and its seconds (nothing
        for work already done in this process): loading the embedding model and the LLM, and the bi-encoder
        reranker's sentence vectors (the ``sentence_vectors`` step, ~45 s on first use of an index). Each
        would otherwise land in the first question's latency — and in a run's p95 and mean seconds."""
        done: dict[str, float] = {}

        def timed(label: str, work: Callable[[], Any], ran: Callable[[Any, float], bool]) -> None:
            started = time.perf_counter()
            try:
                out = work()
            except Exception:  # ask() meets the same failure inside a traced step, where it is recorded and shown
                return
            seconds = time.perf_counter() - started
            if ran(out, seconds):
                done[label] = seconds

        # the embedding model is shared by the process: only a first load takes measurable time (a decomposed
        # graph keeps its retriever inside the per-part graph, where it is loaded on the first question)
        if "retrieve" in self.pipeline.graph.nodes:
            timed("embedding model load", lambda: self.retriever.embedder, lambda _, seconds: seconds > 0.05)
        generator = self.chat_generator
        if getattr(generator, "_model", True) is None and hasattr(generator, "warm_up"):  # llama.cpp, not loaded yet
            timed("LLM load", generator.warm_up, lambda _, __: True)
        f = self.features
        if f.rerank and f.rerank_backend == "bi-encoder":
            timed("sentence vectors", self.prepare_sentence_vectors, lambda work, _: bool((work or {}).get("embedded") or (work or {}).get("loaded")))
        return done

    def prepare_sentence_vectors(self, progress: bool = False) -> dict[str, int]:
        """Embed every sentence of the index once for the bi-encoder reranker (kept next to a saved
        index, so later processes only load them); runs on the first reranked question."""
        # a decomposed graph keeps its reranker inside the per-part graph; the sentence cache is per process, so any bi-encoder fills it
        reranker = self.pipeline.get_component("rerank") if "rerank" in self.pipeline.graph.nodes else Reranker(backend="bi-encoder")
        reranker.warm_up()
        cache = reranker.sentence_cache()
        path = SentenceVectorCache.file_for(self.index.path, cache.embedder_model) if self.index.path else None
        loaded = cache.load(path) if path else 0
        embedded = reranker.prepare(list(self.index.chunks.values()), progress=progress)
        if embedded and path:
            try:
                cache.save(path)
            except OSError:  # a read-only index folder: the vectors stay in memory for this process
                pass
        self._sentence_vectors_ready = True
        return {"loaded": loaded, "embedded": embedded, "cached": len(cache)}

    def _prepare_traced(self) -> None:
        f = self.features
        if not (f.rerank and f.rerank_backend == "bi-encoder" and not self._sentence_vectors_ready and len(self.index)):
            return
        if "rerank" in self.pipeline.graph.nodes and not isinstance(self.pipeline.get_component("rerank"), Reranker):
            return  # the reranker was replaced (replace_steps): nothing of ours to prepare
        with tracing.tracer.trace("haystack.component.run", tags={"haystack.component.name": "sentence_vectors", "haystack.component.type": "SentenceVectorCache"}) as span:
            try:
                span.set_content_tag("haystack.component.output", self.prepare_sentence_vectors())
            except Exception as exc:  # reranking still works without them, embedding sentences as it goes
                span.set_tag("ragkit.error", f"{type(exc).__name__}: {str(exc)[:200]}")

    # -- the question ---------------------------------------------------------------------------
    def _run(self, question: str, **extra: Any) -> dict[str, Any]:
        return self.pipeline.run(graph_inputs(self.pipeline, question, **extra), include_outputs_from=outputs_of(self.pipeline))

    def ask(
        self, question: str, history: list[ChatMessage] | None = None, scope: dict | None = None,
        streaming_callback: Callable[[StreamingChunk], None] | None = None,
    ) -> AgenticResult:
        """Answer ``question``. ``history``: the conversation before it (``Features(follow_ups=True)`` rewrites
        a follow-up with it; :class:`ragkit.conversation.session.ChatSession` keeps and sends it);
        ``scope``: a source filter the person chose (a clarification's answer); ``streaming_callback``: the
        answer's tokens as they are generated (``result.first_token_s`` says when the first came)."""
        question = check_query(question)
        started = time.perf_counter()
        self.pipeline.warm_up()  # loading models is one-time work: not the question's time, nor its deadline
        with self.tracer.collect() as trace:
            self._prepare_traced()
            try:
                with question_deadline(self.config.deadline_s):
                    out = self._run(question, history=history or None, scope=scope or None, streaming_callback=streaming_callback)
            except Exception as exc:  # the graph broke: an explicit, traced failure, never a crash
                result = failed_result(question, trace, exc)
            else:
                result = result_from_outputs(question, out, trace, self.features)
        result.seconds = time.perf_counter() - started
        if trace.first_token is not None:
            result.first_token_s = trace.first_token - started
        return result

    def pause_before(self, question: str, step: str, visit: int = 0) -> Paused:
        """Run ``question`` until just before ``step`` (its ``visit``-th run, from 0) and return that step's
        inputs; the step itself and everything after it do not run."""
        steps = {name for name, _ in walk_all(self.pipeline)}
        if step not in steps:
            raise ValueError(f"no step {step!r} in this graph; its steps: {sorted(steps)}")
        question = check_query(question)
        self.pipeline.warm_up()
        with self.tracer.collect(stop_before=(step, visit)) as trace:
            self._prepare_traced()
            try:
                self._run(question)
            except Exception as exc:
                reached = _reached(exc)
                if reached is None:
                    raise
                return Paused(step, reached.inputs, trace)
        raise RuntimeError(f"the question finished without reaching {step!r} (that branch did not run)")


def _reached(error: BaseException | None) -> StepReached | None:
    """The stop inside ``error`` — raised by the step itself, or wrapped by a sub-pipeline's component."""
    while error is not None:
        if isinstance(error, StepReached):
            return error
        error = error.__cause__ or error.__context__
    return None
