"""RetrievalGate and QueryRewriter: rules, constrained LLM backends with garbage replies, and the engine's graph."""

import pytest
from haystack.components.generators.chat import MockChatGenerator

from ragkit.components.query_rewriter import QueryRewriter, protected_words, rewrite_by_rules, subsequence_grammar
from ragkit.components.retrieval_gate import RetrievalGate
from ragkit.pipeline.features import Features
from ragkit.pipeline.drawing import draw


@pytest.mark.parametrize("question, expected", [
    ("Hey, I want to compare X and Y", "compare X and Y"),
    ("Hi! Can you tell me where Nikola Tesla was born? Thanks!", "where Nikola Tesla was born?"),
    ("I was wondering if functools.lru_cache is thread-safe", "functools.lru_cache is thread-safe"),
    ("Where was Tesla born?", "Where was Tesla born?"),
    ("Hello", "Hello"),  # nothing but noise: left alone (the gate decides what to do with it)
])
def test_rules_strip_only_the_noise(question, expected):
    assert rewrite_by_rules(question) == expected


def test_protected_words_are_names_and_technical_terms():
    assert protected_words("So what does functools.cache do for Python users in 2024?") == ["functools.cache", "Python", "2024"]


def test_the_llm_rewrite_may_only_delete_words_and_must_keep_names():
    question = "Hey, could you compare the Rhine and the Amazon for me"
    good = QueryRewriter(backend="llm", chat_generator=MockChatGenerator(responses="compare the Rhine and the Amazon")).run(query=question)
    assert good["query"] == "compare the Rhine and the Amazon" and "fallback" not in good["rewrite"]
    for reply in ["compare the Nile and the Amazon", "compare the Amazon", "Amazon Rhine compare", "", "{]"]:
        out = QueryRewriter(backend="llm", chat_generator=MockChatGenerator(responses=reply)).run(query=question)
        assert out["query"] == rewrite_by_rules(question) and "fallback" in out["rewrite"], reply


def test_the_subsequence_grammar_parses_in_llama_cpp():
    from llama_cpp import LlamaGrammar

    LlamaGrammar.from_string(subsequence_grammar('Hey, what is "lru_cache" for?'), verbose=False)


def test_round_trips():
    rewriter = QueryRewriter(backend="llm", chat_generator=MockChatGenerator(responses="x y"), prompt="Be brief.")
    assert QueryRewriter.from_dict(rewriter.to_dict()).prompt == "Be brief."
    gate = RetrievalGate(backend="llm", chat_generator=MockChatGenerator(responses="yes"), threshold=0.3)
    assert RetrievalGate.from_dict(gate.to_dict()).threshold == 0.3
    with pytest.raises(ValueError):
        RetrievalGate(backend="llm")


@pytest.mark.parametrize("question, retrieve", [("Hi there!", False), ("what is 12 * 7?", False), ("Where was Tesla born?", True)])
def test_the_rules_gate(question, retrieve):
    out = RetrievalGate().run(query=question)
    assert ("search_query" in out) is retrieve and ("direct_query" in out) is (not retrieve)


@pytest.mark.parametrize("reply, retrieve", [("no", False), ("yes", True), ("perhaps", True), ("", True)])
def test_the_llm_gate_retrieves_when_unsure(reply, retrieve):
    out = RetrievalGate(backend="llm", chat_generator=MockChatGenerator(responses=reply)).run(query="Who wrote Hamlet?")
    assert ("search_query" in out) is retrieve
    assert ("fallback" in out["gate"]) is (reply not in ("yes", "no"))


def test_a_gated_question_skips_retrieval_in_the_engine(sample_index, fast_config):
    from ragkit.pipeline.engine import AgenticRAG

    seen = []

    def respond(messages):
        seen.append(messages[-1].text)
        return "Hello! How can I help?" if "Hi" in messages[-1].text else "Smiljan [1]"

    rag = AgenticRAG(Features(gate=True, rewrite=True, answer_mode="free"), config=fast_config, index=sample_index, chat_generator=MockChatGenerator(response_fn=respond))
    hello = rag.ask("Hi there!")
    assert hello.exit_reason == "no_retrieval" and not hello.sources
    assert hello.trace.step("retrieve") is None and hello.trace.step("gate").decision["retrieve"] == "no"
    fact = rag.ask("Hey, can you tell me where Nikola Tesla was born?")
    assert fact.sources and fact.trace.step("retrieve") is not None
    assert fact.trace.step("rewrite").decision["rewritten"] is True
    assert "Hey" not in seen[-1]  # the answer prompt got the rewritten question


def test_gate_and_rewrite_are_drawn_and_compose_with_the_router():
    text = draw(Features.all_on(gate=True, rewrite=True))
    assert "gate" in text and "rewrite" in text and "direct_question" in text
