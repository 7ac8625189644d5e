"""What a Haystack user expects of ragkit's components and engine (issue 28's ten points), each held here.

Imports, environment variables, tracing beside the user's tracer, no global logging filters, Haystack's
socket and parameter names, custom steps, one correction loop, and a layout without import circles
or oversized modules. The exported-YAML round trip between two machines is in test_export_portability.py,
the drawing at laptop width in tests/browser/test_graph_drawing.py.
"""

from __future__ import annotations

import ast
import inspect
import logging
import textwrap
from pathlib import Path

import pytest
from haystack import Document, Pipeline, tracing
from haystack.components.generators.chat import MockChatGenerator
from haystack.components.routers import ConditionalRouter

import ragkit.components
from ragkit.config import RagConfig
from ragkit.pipeline.drawing import DrawingOnlyLLM
from ragkit.pipeline.engine import AgenticRAG
from ragkit.pipeline.features import Features
from ragkit.pipeline.graph import build_pipeline

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "ragkit"
QUESTION = "Where was Nikola Tesla born?"


def component_classes() -> dict[str, str]:
    """Every ``@component`` / ``@super_component`` class defined in ragkit/components/*.py -> its module."""
    found = {}
    for path in sorted((PACKAGE / "components").glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) and any(getattr(d, "id", getattr(d, "attr", "")) in ("component", "super_component") for d in node.decorator_list):
                found[node.name] = f"ragkit.components.{path.stem}"
    return found


# -- 1. every component imports from ragkit.components -------------------------------------------------
def test_every_component_of_the_package_imports_from_ragkit_components():
    classes = component_classes()
    assert len(classes) >= 25
    assert sorted(ragkit.components.__all__) == sorted(classes)
    for name, module in classes.items():
        assert getattr(ragkit.components, name).__module__ == module
    from ragkit.components import DocumentGrader, HallucinationDetector, QueryRouter, Reranker  # the README's spelling  # noqa: F401


# -- 2. RAGKIT_* variables reach the Python API -------------------------------------------------------
def test_the_python_api_reads_the_same_environment_as_the_cli(monkeypatch, tmp_path):
    from ragkit.index.store import RagIndex

    monkeypatch.setenv("RAGKIT_LLM", "qwen2.5-coder-0.5b")
    monkeypatch.setenv("RAGKIT_TOP_K", "3")
    assert RagConfig().models.llm == "qwen2.5-coder-0.5b" and RagConfig().top_k == 3
    rag = AgenticRAG(Features(), index=RagIndex(embedder="all-MiniLM-L6-v2", dim=8))
    assert rag.config.models.llm == "qwen2.5-coder-0.5b"
    assert rag.chat_generator.to_dict()["init_parameters"]["model"] == "qwen2.5-coder-0.5b"  # the model that will load
    # a value given in code or YAML wins over the environment
    assert RagConfig.from_dict({"models": {"llm": "qwen2.5-coder-1.5b"}}).models.llm == "qwen2.5-coder-1.5b"
    monkeypatch.setenv("RAGKIT_TOP_K", "many")
    with pytest.raises(ValueError, match="RAGKIT_TOP_K='many'"):
        RagConfig()


# -- 3. ragkit's tracer sits beside the user's ------------------------------------------------------
@pytest.mark.integration
def test_a_users_logging_tracer_sees_every_span_of_ask(sample_index, fast_config, caplog):
    from haystack.tracing.logging_tracer import LoggingTracer

    rag = AgenticRAG(Features(grading=True, grader_backend="embedding"), config=fast_config, index=sample_index, chat_generator=MockChatGenerator(responses=["Smiljan [1]."]))
    rag.pipeline.warm_up()
    user_tracer = LoggingTracer()
    tracing.enable_tracing(user_tracer)
    caplog.set_level(logging.DEBUG, logger="haystack.tracing.logging_tracer")
    try:
        result = rag.ask(QUESTION)
        assert tracing.tracer.actual_tracer is user_tracer  # put back as it was
        assert not tracing.tracer.is_content_tracing_enabled  # the user's switch, untouched
    finally:
        tracing.disable_tracing()
    spans = [r for r in caplog.records if r.getMessage() == "Operation: haystack.component.run"]
    assert len(result.trace.steps) >= 8
    assert len(spans) == len(result.trace.steps)  # the user's tracer saw every step ragkit traced
    assert any("ragkit.decision=" in r.getMessage() for r in caplog.records)  # and ragkit's own tags


# -- 4. importing ragkit leaves the user's logging alone ----------------------------------------------
def test_a_users_unsafe_router_still_warns_after_importing_ragkit(caplog):
    import ragkit.pipeline.graph  # noqa: F401  (it once installed a filter that hid this warning)

    caplog.set_level(logging.WARNING)
    ConditionalRouter(routes=[{"condition": "{{ true }}", "output": "{{ x }}", "output_name": "x", "output_type": str}], unsafe=True)
    assert any("Unsafe mode is enabled" in r.getMessage() for r in caplog.records)
    assert not any(f for name in ("", "haystack", "haystack.components.routers.conditional_router") for f in logging.getLogger(name).filters)


# -- 5. Haystack's names ----------------------------------------------------------------------------
def test_components_use_haystacks_socket_and_parameter_names():
    for name in component_classes():
        cls = getattr(ragkit.components, name)
        init = inspect.signature(cls.__init__).parameters
        assert "generator" not in init, f"{name}(generator=…): Haystack's components take chat_generator="
        run = inspect.signature(cls.run).parameters
        assert "question" not in run, f"{name}.run(question=…): the question is `query` in every ragkit component"
        assert list(inspect.signature(cls.warm_up).parameters) == ["self"] if hasattr(cls, "warm_up") else True, f"{name}.warm_up takes parameters"
    from ragkit.components import GuardedGenerator, IndexRetriever

    out = GuardedGenerator(chat_generator=MockChatGenerator(responses=["Smiljan [1]."])).run(messages=[])
    assert out["replies"][0].text == "Smiljan [1]." and out["ok"]  # replies, as Haystack's chat generators
    assert IndexRetriever(index_path="unused").top_k == 10 and inspect.signature(IndexRetriever.run).parameters["top_k"].default is None


def test_no_private_haystack_api_is_used():
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("haystack"):
                private = [a.name for a in node.names if a.name.startswith("_")]
                assert not private, f"{path.relative_to(REPO)} imports {private} from {node.module}"
            if isinstance(node, ast.Attribute) and node.attr in ("_sockets_dict", "__haystack_input__", "__haystack_output__"):
                raise AssertionError(f"{path.relative_to(REPO)}:{node.lineno} reads Haystack's private {node.attr}")


def test_each_loaded_pipeline_has_its_own_generator_shared_by_its_steps(sample_index_dir, fast_config):
    from ragkit.pipeline.export import export_yaml, load_exported
    from ragkit.pipeline.graph_io import walk_all

    text = export_yaml(Features.all_on(), sample_index_dir, fast_config, chat_generator=MockChatGenerator(responses=["x"]))
    first, second = load_exported(text), load_exported(text)

    def generators(pipe):
        return {id(c.chat_generator) for _, c in walk_all(pipe) if getattr(c, "chat_generator", None) is not None}

    assert len(generators(first)) == 1 and len(generators(second)) == 1  # one model per pipeline, as the engine has
    assert generators(first) != generators(second)  # nothing shared across pipelines


# -- 6. a custom step that returns what the graph reads is not a failure ---------------------------
@pytest.mark.integration
def test_the_custom_steps_docstring_example_runs_as_a_clean_step(sample_index, fast_config):
    from ragkit.pipeline import custom_steps

    example = textwrap.dedent(custom_steps.__doc__.split("Usage::")[1].split("A **function**")[0])
    namespace = {"AgenticRAG": lambda features, replace_steps: AgenticRAG(features, config=fast_config, index=sample_index,
                                                                        chat_generator=MockChatGenerator(responses=["Smiljan [1]."]), replace_steps=replace_steps),
                 "Features": Features}
    exec(compile(example, "custom_steps docstring", "exec"), namespace)  # defines shortest_first, builds rag, asks
    result = namespace["rag"].ask(QUESTION)
    step = result.trace.step("rerank")
    assert step is not None and not step.fallbacks and not step.error and "rerank" not in result.failed_steps
    assert step.docs_out == sorted(step.docs_out, key=lambda d: len(sample_index.chunks[d[0]].content or ""))


@pytest.mark.integration
def test_a_custom_step_that_raises_passes_top_k_documents_on(sample_index, fast_config):
    def broken(query, documents, top_k=None):
        raise RuntimeError("my reranker is down")

    rag = AgenticRAG(Features(rerank=True, top_k=3, rerank_candidates=10), config=fast_config, index=sample_index,
                     chat_generator=MockChatGenerator(responses=["Smiljan [1]."]), replace_steps={"rerank": broken})
    result = rag.ask(QUESTION)
    step = result.trace.step("rerank")
    assert len(step.docs_in) == 10 and len(step.docs_out) == 3  # the step's own bound, not every candidate
    assert "my reranker is down" in step.fallbacks[0] and "rerank" in result.failed_steps


# -- 9. one correction loop ---------------------------------------------------------------------------
def test_the_engine_runs_the_one_self_correcting_answerer():
    from ragkit.components import SelfCorrectingAnswerer
    from ragkit.components import self_correction

    assert not hasattr(self_correction, "correction_loop")
    pipe = build_pipeline(Features(hallucination_check=True, self_correction=True), DrawingOnlyLLM(), index_path="(drawing)")
    assert isinstance(pipe.get_component("self_correction"), SelfCorrectingAnswerer)
    loop = SelfCorrectingAnswerer(chat_generator=MockChatGenerator(responses=["x"]), max_corrections=2, answer_task="Answer: {question}")
    again = SelfCorrectingAnswerer.from_dict(loop.to_dict())
    assert again.max_corrections == 2 and again.answer_task == "Answer: {question}" and type(again.chat_generator) is MockChatGenerator
    assert again.to_dict() == loop.to_dict()
    out = again.run(query=QUESTION, documents=[])
    assert out["exit_reason"] == "no_context" and out["replies"][0].text == "The documents don't say."


# -- 10. layout: no import circles, no module over 400 lines -------------------------------------------
def module_imports() -> dict[str, set[str]]:
    """ragkit module -> the ragkit modules it imports (at the top or inside a function)."""
    modules = {".".join(p.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__"): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
                for alias in node.names:
                    target = f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                    edges.add(target)
            elif isinstance(node, ast.Import):
                edges.update(a.name for a in node.names)
        graph[name] = {e for e in edges if e in modules and e != name and not modules[e].name == "__init__.py"}
    return graph


def test_no_module_imports_a_module_that_imports_it_back():
    graph = module_imports()
    circles = []

    def visit(node, path, seen):
        for nxt in graph.get(node, ()):
            if nxt == path[0]:
                circles.append(" -> ".join(path + [nxt]))
            elif nxt not in seen:
                seen.add(nxt)
                visit(nxt, path + [nxt], seen)

    for start in graph:
        visit(start, [start], {start})
    assert not circles, "import circles:\n" + "\n".join(sorted(set(circles))[:10])


def test_no_module_is_over_400_lines():
    long = {str(p.relative_to(REPO)): n for p in PACKAGE.rglob("*.py") if (n := len(p.read_text().splitlines())) > 400}
    assert not long, long
