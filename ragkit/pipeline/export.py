"""Take the engine away: a ``Features`` graph as Haystack YAML, loaded back and run without ragkit's engine.

``export_yaml`` writes the graph :mod:`ragkit.pipeline.graph` builds — every component with its init
parameters, every connection, and ``metadata.ragkit`` naming the inputs the caller fills — as YAML
that loads on another machine with ragkit installed: models are named as the user named them
(``qwen2.5-coder-0.5b``, resolved where the file loads, :mod:`ragkit.llm.portable`), threads and
device are the loading machine's, and the YAML has no anchors (``&id001``) for a reader to chase.
The index is the folder given, as given (``ragkit export --index``).

``load_exported`` restores it with Haystack's allowlist limited to ragkit's modules (Haystack's own
are always allowed) and with :func:`shared_generators`: the LLM steps of one loaded pipeline share
one generator per distinct model, so the model loads once and llama.cpp's prompt cache is shared
between the grader, the answer and the judge, as in the engine that exported it. Two pipelines
loaded separately share nothing. ``run_exported`` asks it one question and reads the answer and
sources the way the engine does. A pipeline that holds an in-process llama.cpp model answers one
question at a time (llama-cpp-python's ``Llama`` is not thread-safe; Hayhooks calls from a thread pool):
concurrent questions wait their turn. Served behind ``ragkit serve --llm-server`` they run side by side.

Usage::

    text = export_yaml(Features.all_on(), ".ragkit/index", RagConfig())
    pipe = load_exported(text)
    run_exported(pipe, "Where was Nikola Tesla born?")["answer"]
    # or, with Haystack alone:
    Pipeline.loads(text, allowed_modules=["ragkit.*"], callbacks=shared_generators())
"""

from __future__ import annotations

import json
import os
import threading
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import yaml
from haystack import Pipeline
from haystack.core.serialization import DeserializationCallbacks
from haystack.marshal import YamlMarshaller
from haystack.marshal.yaml import YamlDumper

from ragkit.config import RagConfig
from ragkit.index.retrieval import check_query
from ragkit.index.stores import is_store_url, without_password
from ragkit.llm.faults import is_llama_cpp, question_deadline
from ragkit.llm.generators import build_chat_generator
from ragkit.pipeline.features import Features
from ragkit.pipeline.graph import build_pipeline
from ragkit.pipeline.graph_io import graph_inputs, outputs_of
from ragkit.pipeline.result import AgenticResult, failed_result, result_from_outputs
from ragkit.pipeline.trace import RagkitTracer

ALLOWED_MODULES = ["ragkit.*"]


class _PlainDumper(YamlDumper):
    """YAML without anchors: a value used twice is written twice."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


class PlainYamlMarshaller(YamlMarshaller):
    """Haystack's YAML marshaller, writing no ``&id001`` anchors (it loads the same)."""

    def marshal(self, dict_: dict[str, Any]) -> str:
        return yaml.dump(dict_, Dumper=_PlainDumper)


def dump_yaml(pipe: Pipeline) -> str:
    return pipe.dumps(marshaller=PlainYamlMarshaller())


def _location(where: str | Path) -> str:
    """A local index as an absolute path; a store URL without its password (exported YAML holds no secret)."""
    return without_password(str(where)) if is_store_url(where) else str(Path(where).resolve())


def export_yaml(features: Features, index_dir: str | Path, config: RagConfig | None = None, chat_generator: Any = None) -> str:
    config = config or RagConfig()
    chat_generator = chat_generator if chat_generator is not None else build_chat_generator(config.models)
    return dump_yaml(build_pipeline(features, chat_generator, index_path=_location(config.store or index_dir), config=config))


def shared_generators() -> DeserializationCallbacks:
    """Callbacks for ``Pipeline.loads``/``from_dict``: the components of the pipeline being loaded get one
    ``chat_generator`` instance per distinct serialized generator (sub-pipelines included)."""
    by_config: dict[str, Any] = {}

    def share(_name: str, _cls: type, init_params: dict[str, Any]) -> None:
        generator = init_params.get("chat_generator")
        if generator is None or not hasattr(generator, "to_dict"):
            return
        key = json.dumps(generator.to_dict(), sort_keys=True, default=str)
        init_params["chat_generator"] = by_config.setdefault(key, generator)

    return DeserializationCallbacks(component_pre_init=share)


def load_exported(text_or_path: str | Path) -> Pipeline:
    is_path = isinstance(text_or_path, Path) or (isinstance(text_or_path, str) and "\n" not in text_or_path)
    text = Path(text_or_path).read_text(encoding="utf-8") if is_path else text_or_path
    pipe = Pipeline.loads(text, allowed_modules=ALLOWED_MODULES, callbacks=shared_generators())
    if "ragkit" not in pipe.metadata:
        raise ValueError("not a ragkit pipeline: its metadata has no 'ragkit' section naming the question inputs")
    return pipe


def ask_exported(
    pipe: Pipeline, question: str, history: list | None = None, scope: dict | None = None, streaming_callback: Any = None, on_step: Any = None,
) -> AgenticResult:
    """Ask an exported pipeline one question, as ``AgenticRAG.ask`` does: the question checked, the
    question's deadline, the trace (``on_step`` hears each step), a failed graph an explicit failed result.
    ``history``, ``scope`` and ``streaming_callback`` go to the graph's sockets for them (``graph_inputs``)."""
    features = Features.from_dict(pipe.metadata["ragkit"]["features"])
    question = check_query(question)
    deadline = float(os.environ.get("RAGKIT_DEADLINE_S") or pipe.metadata["ragkit"].get("deadline_s") or 0)
    with _one_question_at_a_time(pipe), RagkitTracer(listener=on_step).collect() as trace, question_deadline(deadline):
        try:
            out = pipe.run(graph_inputs(pipe, question, history=history or None, scope=scope or None, streaming_callback=streaming_callback),
                           include_outputs_from=outputs_of(pipe))
        except Exception as exc:  # the graph broke: an explicit failed result, as AgenticRAG.ask gives
            return failed_result(question, trace, exc)
        return result_from_outputs(question, out, trace, features)


_LOCKS_GUARD = threading.Lock()
_LOCK_ATTRIBUTE = "_ragkit_question_lock"  # kept on the pipeline itself (a Pipeline is neither hashable nor weakly keyed)


def _one_question_at_a_time(pipe: Pipeline) -> Any:
    """A lock per pipeline that holds an in-process llama.cpp model (its model is not thread-safe); else no lock."""
    with _LOCKS_GUARD:
        if not hasattr(pipe, _LOCK_ATTRIBUTE):
            setattr(pipe, _LOCK_ATTRIBUTE, threading.Lock() if _holds_in_process_llm(pipe) else nullcontext())
        return getattr(pipe, _LOCK_ATTRIBUTE)


def _holds_in_process_llm(pipe: Pipeline) -> bool:
    for _, instance in pipe.walk():
        if is_llama_cpp(instance) or is_llama_cpp(getattr(instance, "chat_generator", None)):
            return True
        inner = getattr(instance, "pipeline", None)  # a SuperComponent's pipeline
        if isinstance(inner, Pipeline) and _holds_in_process_llm(inner):
            return True
    return False


def run_exported(pipe: Pipeline, question: str) -> dict[str, Any]:
    """Ask an exported pipeline one question: answer, sources, confidence, exit reason, trace rows."""
    result = ask_exported(pipe, question)
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
        "trace": result.trace.table(),
    }
