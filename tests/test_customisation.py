"""Customisation: a step's own generator and prompt (Features.step_models / step_prompts), and a step
replaced by a function or a component whose failure stays on the result."""

import pytest
from haystack import Document, Pipeline, component
from haystack.components.generators.chat import MockChatGenerator

from ragkit.components.hyde import HyDEEmbedder
from ragkit.components.query_router import QueryRouter
from ragkit.index.store import RagIndex
from ragkit.pipeline.custom_steps import CustomStep, replace_steps
from ragkit.pipeline.features import Features
from ragkit.pipeline.drawing import DrawingOnlyLLM
from ragkit.pipeline.graph import build_pipeline


class Recording:
    """Haystack's mock generator, remembering every system prompt it was sent."""

    def __init__(self, responses):
        self.mock, self.systems, self.users = MockChatGenerator(responses=responses), [], []

    def to_dict(self):
        return self.mock.to_dict()

    def run(self, messages, **kwargs):
        self.systems += [m.text for m in messages if m.role.value == "system"]
        self.users += [m.text for m in messages if m.role.value == "user"]
        return self.mock.run(messages=messages, **kwargs)


@pytest.fixture(scope="module")
def tiny_index(tmp_path_factory, fast_config):
    from ragkit.index.indexer import build_index

    folder = tmp_path_factory.mktemp("docs")
    (folder / "tesla.md").write_text("# Tesla\n\nNikola Tesla was born in Smiljan in 1856. He studied engineering at Graz.\n")
    (folder / "rhine.md").write_text("# Rhine\n\nThe Rhine flows from the Swiss Alps to the North Sea.\n")
    path = tmp_path_factory.mktemp("index") / "index"
    build_index(folder, path, fast_config, progress=False)
    return RagIndex.load(path)


def test_step_names_and_prompts_are_validated():
    Features(step_models={"decompose": "qwen2.5-coder-0.5b", "answer": "qwen2.5-coder-1.5b"}, step_prompts={"hyde": "Write a passage."}).validate()
    with pytest.raises(ValueError, match="step_models"):
        Features(step_models={"answr": "x"}).validate()
    with pytest.raises(ValueError, match="step_prompts"):
        Features(step_prompts={"hallucination": "Judge."}).validate()  # read against a calibrated threshold: fixed
    with pytest.raises(ValueError, match="step_prompts"):
        Features(step_prompts={"hyde": "  "}).validate()
    with pytest.raises(ValueError, match="placeholder"):
        Features(step_prompts={"multi_hop": "Enough?"}).validate()  # a task template: it must say where the question goes
    assert Features.from_dict(Features(step_prompts={"gate": "Decide."}).to_dict()).step_prompts == {"gate": "Decide."}


def test_each_step_gets_its_own_generator_and_prompt():
    planner, answerer = DrawingOnlyLLM(), DrawingOnlyLLM()
    f = Features(routing=True, router_backend="llm", hyde=True, rewrite=True, rewrite_backend="llm", step_prompts={"router": "Route it.", "hyde": "Imagine a passage."})
    pipe = build_pipeline(f, answerer, index_path="(drawing)", step_generators={"router": planner, "hyde": planner, "rewrite": planner})
    assert pipe.get_component("router").chat_generator is planner and pipe.get_component("router").prompt == "Route it."
    assert pipe.get_component("hyde").chat_generator is planner and pipe.get_component("hyde").prompt == "Imagine a passage."
    assert pipe.get_component("rewrite").chat_generator is planner
    assert pipe.get_component("answer").chat_generator is answerer  # not named: the shared generator


def test_decompose_step_generator_reaches_the_decomposer_and_the_inner_graph():
    planner, answerer = DrawingOnlyLLM(), DrawingOnlyLLM()
    f = Features(decompose=True, decomposer_backend="llm", hyde=True, step_prompts={"decompose": "Split it: {question}"})
    pipe = build_pipeline(f, answerer, index_path="(drawing)", step_generators={"decompose": planner, "hyde": planner})
    assert pipe.get_component("decompose").chat_generator is planner and pipe.get_component("decompose").prompt == "Split it: {question}"
    assert pipe.get_component("per_part").pipeline.get_component("hyde").chat_generator is planner


def test_a_custom_prompt_is_what_the_llm_receives():
    llm = Recording(responses="FACTUAL")
    QueryRouter(backend="llm", chat_generator=llm, prompt="Label the question.").run(query="Where was Tesla born?")
    assert llm.systems == ["Label the question."]
    hyde_llm = Recording(responses="Tesla was born in Smiljan.")
    HyDEEmbedder(chat_generator=hyde_llm, prompt="Write one sentence.").passages("Where was Tesla born?")
    assert hyde_llm.systems == ["Write one sentence."]
    assert HyDEEmbedder.from_dict(HyDEEmbedder(chat_generator=hyde_llm, prompt="P").to_dict()).prompt == "P"


def test_the_answer_and_grading_tasks_follow_the_sources(tiny_index, fast_config):
    from ragkit.pipeline.engine import AgenticRAG

    answer_llm = Recording(responses="Smiljan [1].")
    f = Features(answer_mode="free", top_k=1, step_prompts={"answer": "Task: answer in French.\nQuestion: {question}"})
    result = AgenticRAG(f, config=fast_config, index=tiny_index, chat_generator=answer_llm).ask("Where was Tesla born?")
    assert result.answer.startswith("Smiljan")
    # the sources first (the prefix the grader and judge share), then the custom task with the question filled in
    assert "Smiljan" in answer_llm.users[-1] and answer_llm.users[-1].endswith("Task: answer in French.\nQuestion: Where was Tesla born?")
    from ragkit.components.document_grader import DocumentGrader

    grader = DocumentGrader(chat_generator=MockChatGenerator(responses="[9]"), prompt="Grade {n} sources for: {question}")
    assert DocumentGrader.from_dict(grader.to_dict()).prompt == "Grade {n} sources for: {question}"
    with pytest.raises(ValueError, match="placeholder"):
        DocumentGrader(chat_generator=MockChatGenerator(responses="[9]"), prompt="Grade them.")


def test_the_engine_loads_one_generator_per_named_model(monkeypatch, tiny_index, fast_config):
    from ragkit.pipeline import engine

    built = []
    monkeypatch.setattr(engine, "build_chat_generator", lambda models: built.append(models.llm) or MockChatGenerator(responses="x"))
    f = Features(decompose=True, decomposer_backend="llm", rewrite=True, rewrite_backend="llm",
                 step_models={"decompose": "planner.gguf", "rewrite": "planner.gguf", "answer": fast_config.models.llm})
    rag = engine.AgenticRAG(f, config=fast_config, index=tiny_index, chat_generator=MockChatGenerator(responses="x"))
    assert built == ["planner.gguf"]  # the answer's model is the config's: the given generator serves it
    assert rag.step_generators["decompose"] is rag.step_generators["rewrite"] is not rag.chat_generator
    assert rag.step_generators["answer"] is rag.chat_generator


def shortest_first(query, documents, top_k=None):
    return {"documents": sorted(documents, key=lambda d: len(d.content or ""))[: top_k or 5], "reranking": {"custom": True}}


def test_a_function_replaces_a_step_and_is_traced(tiny_index, fast_config):
    from ragkit.pipeline.engine import AgenticRAG

    rag = AgenticRAG(Features(rerank=True, answer_mode="free", top_k=2), config=fast_config, index=tiny_index,
                     chat_generator=MockChatGenerator(responses="Smiljan [1]."), replace_steps={"rerank": shortest_first})
    assert isinstance(rag.pipeline.get_component("rerank"), CustomStep)
    result = rag.ask("Where was Tesla born?")
    lengths = [len(d.content) for d in result.sources]
    assert lengths == sorted(lengths) and result.trace.step("rerank") is not None
    assert not result.trace.step("rerank").fallbacks
    # a module-level function exports and loads back as the same function (its module must be allowed, as any code)
    restored = Pipeline.loads(rag.to_yaml(), allowed_modules=["ragkit.*", "haystack.*", shortest_first.__module__ + ".*"])
    assert restored.get_component("rerank").function is shortest_first


def test_a_failing_replacement_passes_its_inputs_through_and_lowers_confidence(tiny_index, fast_config):
    from ragkit.pipeline.engine import AgenticRAG

    def broken(query, documents, top_k=None):
        raise RuntimeError("my reranker is down")

    question = "Where was Tesla born?"
    kwargs = dict(config=fast_config, index=tiny_index, chat_generator=MockChatGenerator(responses="Smiljan [1]."))
    healthy = AgenticRAG(Features(rerank=True, answer_mode="free", top_k=2), replace_steps={"rerank": shortest_first}, **kwargs).ask(question)
    rag = AgenticRAG(Features(rerank=True, answer_mode="free", top_k=2), replace_steps={"rerank": broken}, **kwargs)
    result = rag.ask(question)
    assert result.exit_reason != "pipeline_error" and result.sources  # the retrieved chunks went on
    assert any("my reranker is down" in f for f in result.trace.step("rerank").fallbacks)
    assert result.confidence < healthy.confidence


def test_a_replacement_that_cannot_degrade_becomes_a_pipeline_error(tiny_index, fast_config):
    from ragkit.pipeline.engine import AgenticRAG

    def mute(messages, **kwargs):
        raise RuntimeError("no answer today")

    rag = AgenticRAG(Features(answer_mode="free"), config=fast_config, index=tiny_index, chat_generator=MockChatGenerator(responses="x"), replace_steps={"answer": mute})
    result = rag.ask("Where was Tesla born?")
    assert result.exit_reason == "pipeline_error" and result.confidence == 0


def test_a_replacing_component_must_have_the_sockets_the_graph_uses():
    @component
    class OnlyDocuments:
        @component.output_types(documents=list[Document])
        def run(self, documents: list[Document]):
            return {"documents": documents}

    pipe = build_pipeline(Features(rerank=True), DrawingOnlyLLM(), index_path="(drawing)")
    with pytest.raises(ValueError, match="lacks the sockets"):
        replace_steps(pipe, {"rerank": OnlyDocuments()}, caller_sockets=pipe.metadata["ragkit"]["inputs"]["query"])
    with pytest.raises(ValueError, match="no step 'rerenk'"):
        replace_steps(pipe, {"rerenk": shortest_first})


def test_a_lambda_cannot_be_exported_but_says_why():
    pipe = build_pipeline(Features(rerank=True), DrawingOnlyLLM(), index_path="(drawing)")
    replace_steps(pipe, {"rerank": lambda query, documents, top_k=None: {"documents": documents}})
    with pytest.raises(ValueError, match="module level"):
        pipe.get_component("rerank").to_dict()


def test_a_step_inside_the_per_part_graph_can_be_replaced():
    pipe = build_pipeline(Features(decompose=True, rerank=True), DrawingOnlyLLM(), index_path="(drawing)")
    replace_steps(pipe, {"rerank": shortest_first})
    assert isinstance(pipe.get_component("per_part").pipeline.get_component("rerank"), CustomStep)
