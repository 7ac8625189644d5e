"""Planning: a question that asks several things is split, each part answered by the whole graph, one answer attributes each part."""

import json

import pytest
from haystack.components.generators.chat import MockChatGenerator
from haystack.dataclasses import ChatMessage

from ragkit.components.per_part import PerPartAnswerer, renumber
from ragkit.components.query_decomposer import QueryDecomposer, looks_multi, parse_parts, split_by_rules
from ragkit.pipeline.features import Features
from ragkit.pipeline.drawing import draw
from ragkit.pipeline.graph import build_pipeline
from ragkit.pipeline.trace import RagkitTracer


@pytest.mark.parametrize("question,parts,kind", [
    ("Where was Nikola Tesla born, and what did he study?", ["Where was Nikola Tesla born?", "What did Nikola Tesla study?"], "multi"),
    ("When did Tesla move to New York; who hired him?", ["When did Tesla move to New York?", "Who hired Tesla?"], "multi"),
    ("Which team won Super Bowl 50? Who was its MVP?", ["Which team won Super Bowl 50?", "Who was Super Bowl 50's MVP?"], "multi"),
    ("Compare the Rhine and the Danube.", ["What is the Rhine?", "What is the Danube?"], "comparison"),
    ("What is the difference between lru_cache and cache?", ["What is lru_cache?", "What is cache?"], "comparison"),
    ("Who won Super Bowl 50?", ["Who won Super Bowl 50?"], "single"),
    ("Who were Simon and Garfunkel?", ["Who were Simon and Garfunkel?"], "single"),  # "and" inside one ask
    ("Which rivers flow into the Rhine and the Danube?", ["Which rivers flow into the Rhine and the Danube?"], "single"),
    # "and were ..." continues the clause; only ", and" or a wh-word after "and" starts a question
    ("How many astronauts flew and were rewarded, and in what year did the Normans invade?",
     ["How many astronauts flew and were rewarded?", "In what year did the Normans invade?"], "multi"),
])
def test_rules_split_only_where_a_new_question_starts(question, parts, kind):
    assert split_by_rules(question) == (parts, kind)


def test_rules_keep_at_most_max_parts():
    question = "Where was Tesla born? When did he die? What did he study? Who hired him? Where did he live?"
    parts, kind = split_by_rules(question, max_parts=3)
    assert kind == "multi" and len(parts) == 3 and parts[2] == "What did Tesla study?"


def test_llm_parts_must_be_questions_made_of_the_questions_words():
    question = "Where was Tesla born and what did he study?"
    assert parse_parts('["Where was Tesla born?", "What did Tesla study?"]', question, 3) == ["Where was Tesla born?", "What did Tesla study?"]
    for bad in ("not json", '["Where was Tesla born?", "What is the capital of France?"]', "[]", '{"a": 1}'):
        with pytest.raises(ValueError):
            parse_parts(bad, question, 3)


def reply_with(text):
    return MockChatGenerator(response_fn=lambda messages: text)


def decompose(decomposer, question):
    from haystack import Pipeline

    pipe = Pipeline()
    pipe.add_component("decompose", decomposer)
    with RagkitTracer().collect() as trace:
        out = pipe.run({"decompose": {"query": question}})["decompose"]
    return out, trace.step("decompose")


def test_the_llm_backend_splits_and_an_unusable_reply_keeps_the_rules_split_on_the_trace():
    question = "Where was Tesla born, what did he study?"  # no "and": the rules see one question
    assert looks_multi(question) is False or split_by_rules(question)[1] == "single"
    good = QueryDecomposer(backend="llm", chat_generator=reply_with(json.dumps(["Where was Tesla born?", "What did Tesla study?"])))
    out, step = decompose(good, question)
    assert out["parts"] == ["Where was Tesla born?", "What did Tesla study?"] and out["decomposition"]["by"] == "llm"
    assert step.llm_calls == 1
    broken = QueryDecomposer(backend="llm", chat_generator=reply_with("Sure! Here are the parts: 1) Tesla"))
    out, step = decompose(broken, "Who won Super Bowl 50?")
    assert out["parts"] == ["Who won Super Bowl 50?"] and "unusable" in out["decomposition"]["by"]
    assert step.fallbacks  # the failed call is on the trace, not hidden


def test_decomposer_round_trips_and_rejects_bad_settings():
    d = QueryDecomposer(backend="rules", max_parts=4)
    assert QueryDecomposer.from_dict(d.to_dict()).max_parts == 4
    with pytest.raises(ValueError):
        QueryDecomposer(backend="llm")  # no generator
    with pytest.raises(ValueError):
        QueryDecomposer(backend="rules", max_parts=1)
    with pytest.raises(ValueError):
        Features(decompose=True, max_parts=9).validate()
    with pytest.raises(ValueError):
        Features(decomposer_backend="magic").validate()


def test_citations_are_renumbered_into_the_merged_sources():
    from haystack import Document

    a, b, c = (Document(content=t) for t in ("a", "b", "c"))
    assert renumber("x [1] y [2] z [7]", [b, c], [a, b, c]) == "x [2] y [3] z [7]"


def test_the_planning_graph_draws_the_per_part_graph_inside_and_round_trips(tmp_path):
    text = draw(Features(decompose=True, hallucination_check=True))
    assert "subgraph per_part" in text and "per_part__answer" in text and "decompose -->" in text
    pipe = build_pipeline(Features(decompose=True), MockChatGenerator(), index_path=str(tmp_path / "index"))
    data = pipe.to_dict()
    inner = data["components"]["per_part"]["init_parameters"]["pipeline"]
    assert "answer" in inner["components"] and "decompose" not in inner["components"]
    again = PerPartAnswerer.from_dict(data["components"]["per_part"])
    assert set(again.pipeline.graph.nodes) == set(pipe.get_component("per_part").pipeline.graph.nodes)


@pytest.mark.integration
def test_a_two_part_question_gets_both_parts_answered_and_cited(sample_index, fast_config):
    from test_agentic import ScriptedLLM, make

    script = ScriptedLLM(answer="The answer is in the source [1].")
    rag = make(sample_index, fast_config, Features(answer_mode="free", decompose=True), script)
    result = rag.ask("Where was Nikola Tesla born, and who won Super Bowl 50?")
    parts = result.details["parts"]
    assert [p["question"] for p in parts] == ["Where was Nikola Tesla born?", "Who won Super Bowl 50?"]
    assert script.calls.count("answer") == 2  # one answer per part
    lines = result.answer.splitlines()
    assert len(lines) == 2 and lines[0].startswith("Where was Nikola Tesla born?") and lines[1].startswith("Who won Super Bowl 50?")
    # each part cites its own first source, renumbered into the merged list
    cited = [int(line.rsplit("[", 1)[1].rstrip("].")) for line in lines]
    assert cited[0] != cited[1] and all(1 <= k <= len(result.sources) for k in cited)
    assert "Tesla" in result.sources[cited[0] - 1].content and "Super Bowl" in result.sources[cited[1] - 1].content
    assert result.confidence == pytest.approx(parts[0]["confidence"] * parts[1]["confidence"])
    assert result.details["decomposition"]["kind"] == "multi"
    assert [s.name for s in result.trace.steps].count("retrieve") == 2


@pytest.mark.integration
def test_a_single_question_is_answered_as_without_planning(sample_index, fast_config):
    from test_agentic import ScriptedLLM, make

    planned = make(sample_index, fast_config, Features(answer_mode="free", decompose=True), ScriptedLLM()).ask("Where was Nikola Tesla born?")
    plain = make(sample_index, fast_config, Features(answer_mode="free"), ScriptedLLM()).ask("Where was Nikola Tesla born?")
    assert planned.answer == plain.answer and planned.confidence == pytest.approx(plain.confidence)
    assert [d.id for d in planned.sources] == [d.id for d in plain.sources]


def test_sentence_vectors_are_prepared_for_a_decomposed_graph_with_reranking(sample_index, fast_config):
    """The reranker sits inside the per-part graph: preparing its sentence vectors must still work."""
    from haystack.components.generators.chat import MockChatGenerator

    from ragkit.pipeline.engine import AgenticRAG
    from ragkit.pipeline.features import Features

    rag = AgenticRAG(Features(decompose=True, rerank=True), config=fast_config, index=sample_index, chat_generator=MockChatGenerator(responses="Smiljan"))
    assert "rerank" not in rag.pipeline.graph.nodes
    assert rag.prepare_sentence_vectors()["cached"] > 0
