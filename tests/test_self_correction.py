"""SelfCorrectingAnswerer (a Haystack pipeline loop) and GuardedGenerator, with scripted mock LLMs."""

import numpy as np
import pytest
from haystack import Document, Pipeline
from haystack.components.generators.chat import MockChatGenerator

from ragkit.pipeline.engine import AgenticRAG
from ragkit.components.guarded_generator import GuardedGenerator
from ragkit.components.self_correction import SelfCorrectingAnswerer
from ragkit.pipeline.features import Features
from ragkit.llm.prompts import NO_ANSWER
from ragkit.llm.structured import FirstTokenMask
from conftest import reply_dict
from ragkit.pipeline.trace import RagkitTracer

DOCS = [Document(content="Nikola Tesla was born in Smiljan in 1856.", meta={"title": "Tesla"})]


def scripted(judgements, fail_strict=False):
    """Answer prompts get an answer; judge prompts get the next judgement (the last one repeats)."""
    calls = []

    def respond(messages):
        text = messages[-1].text
        if "Claims:" in text:
            calls.append("judge")
            label = judgements.pop(0) if len(judgements) > 1 else judgements[0]
            return f'["{label}"]'
        if "only facts stated" in text:
            calls.append("strict")
            if fail_strict:
                raise TimeoutError("server timed out")
            return "Tesla was born in Smiljan [1]."
        calls.append("answer")
        return "Tesla was born in Paris [1]."

    return MockChatGenerator(response_fn=respond), calls


def test_supported_first_answer_exits_without_retry():
    llm, calls = scripted(["yes"])
    out = SelfCorrectingAnswerer(chat_generator=llm, max_corrections=2).run(query="Where was Tesla born?", documents=DOCS)
    assert out["exit_reason"] == "supported" and out["corrections"] == 0 and calls == ["answer", "judge"]
    assert out["support"] == 1.0 and out["replies"][0].text == "Tesla was born in Paris [1]."


def test_unsupported_answer_is_retried_under_the_strict_prompt():
    llm, calls = scripted(["no", "yes"])
    tracer = RagkitTracer()
    with tracer.collect() as trace:
        out = SelfCorrectingAnswerer(chat_generator=llm, max_corrections=2).run(query="Where was Tesla born?", documents=DOCS)
    assert out["exit_reason"] == "supported" and out["corrections"] == 1 and out["replies"][0].text == "Tesla was born in Smiljan [1]."
    assert calls == ["answer", "judge", "strict", "judge"]
    routers = [s for s in trace.steps if s.name == "correction_router"]
    assert [r.decision.get("exit_reason", "retry") for r in routers] == ["retry", "supported"]


@pytest.mark.parametrize("bound", [0, 1, 3])
def test_the_loop_is_bounded(bound):
    llm, calls = scripted(["no"])
    out = SelfCorrectingAnswerer(chat_generator=llm, max_corrections=bound).run(query="Where was Tesla born?", documents=DOCS)
    assert out["exit_reason"] == "max_corrections" and out["corrections"] == bound
    assert calls.count("strict") == bound and calls.count("judge") == bound + 1


def test_no_documents_exits_before_any_llm_call():
    llm, calls = scripted(["yes"])
    out = SelfCorrectingAnswerer(chat_generator=llm).run(query="Where was Tesla born?", documents=[])
    assert out["exit_reason"] == "no_context" and out["replies"][0].text == NO_ANSWER and calls == []


def test_a_failed_retry_keeps_the_previous_answer():
    llm, calls = scripted(["no"], fail_strict=True)
    out = SelfCorrectingAnswerer(chat_generator=llm, max_corrections=1).run(query="Where was Tesla born?", documents=DOCS)
    assert out["replies"][0].text == "Tesla was born in Paris [1]." and out["exit_reason"] == "max_corrections"


def test_round_trip_keeps_the_bound_and_threshold():
    llm = MockChatGenerator(responses=["yes"])
    again = SelfCorrectingAnswerer.from_dict(SelfCorrectingAnswerer(chat_generator=llm, threshold=0.7, max_corrections=3).to_dict())
    assert again.max_corrections == 3 and again.threshold == 0.7 and again.detector.threshold == 0.7


def test_guarded_generator_turns_failures_into_a_traced_fallback():
    def broken(messages):
        raise ConnectionError("no server")

    tracer = RagkitTracer()
    with tracer.collect() as trace:
        pipe = Pipeline()
        pipe.add_component("answer", GuardedGenerator(chat_generator=MockChatGenerator(response_fn=broken)))
        out = pipe.run({"answer": {"messages": [], "fallback": "kept"}})
    assert reply_dict(out["answer"]) == {"text": "kept", "ok": False, "tokens": {}, "evidence": None, "mode": "free"}
    assert any("answer: llm_error: MockChatGenerator failed (ConnectionError" in f for f in trace.fallbacks)
    empty = GuardedGenerator(chat_generator=MockChatGenerator(responses=["   "])).run(messages=[])
    assert reply_dict(empty) == {"text": NO_ANSWER, "ok": False, "tokens": {}, "evidence": None, "mode": "free"}
    again = GuardedGenerator.from_dict(GuardedGenerator(chat_generator=MockChatGenerator(responses=["x"]), max_tokens=7).to_dict())
    assert again.max_tokens == 7


@pytest.mark.parametrize("reply", ["[1]", " [2]. ", "[1][3]", "[1, 2]"])
def test_a_reply_that_is_only_a_citation_is_a_traced_fallback(reply):
    tracer = RagkitTracer()
    with tracer.collect() as trace:
        pipe = Pipeline()
        pipe.add_component("answer", GuardedGenerator(chat_generator=MockChatGenerator(responses=[reply])))
        out = pipe.run({"answer": {"messages": [], "fallback": "kept"}})["answer"]
    assert reply_dict(out) == {"text": "kept", "ok": False, "tokens": {}, "evidence": None, "mode": "free"}
    assert any("answer: parse_failed: the reply is only a citation mark" in f for f in trace.fallbacks)


def test_an_echoed_decline_instruction_is_a_decline_and_raw_mode_keeps_any_text():
    echoed = NO_ANSWER + " only if none of the sources mentions it."
    assert reply_dict(GuardedGenerator(chat_generator=MockChatGenerator(responses=[echoed])).run(messages=[])) == {"text": NO_ANSWER, "ok": True, "tokens": {}, "evidence": None, "mode": "free"}
    raw = GuardedGenerator(chat_generator=MockChatGenerator(responses=["[1]"]), answer_format=False)
    assert reply_dict(raw.run(messages=[])) == {"text": "[1]", "ok": True, "tokens": {}, "evidence": None, "mode": "free"}
    assert GuardedGenerator.from_dict(raw.to_dict()).answer_format is False


def test_bare_citation_answers_make_agentic_rag_decline_with_the_reason_traced(sample_index, fast_config):
    rag = AgenticRAG(Features(answer_mode="free"), config=fast_config, index=sample_index, chat_generator=MockChatGenerator(responses=["[2]"]))
    result = rag.ask("What does the sample say about retrieval?")
    assert result.answer == NO_ANSWER
    assert any("parse_failed: the reply is only a citation mark" in f for f in result.trace.fallbacks)


def test_first_token_mask_bans_only_the_first_generated_position():
    mask = FirstTokenMask(np.array([1, 3], dtype=np.intc))
    prompt = np.arange(5)
    first = mask(prompt, np.zeros(4, dtype=np.single))
    later = mask(np.arange(6), np.zeros(4, dtype=np.single))
    assert list(first) == [0, -np.inf, 0, -np.inf] and list(later) == [0, 0, 0, 0]


def test_a_copied_span_exits_the_loop_without_a_judge_call():
    from ragkit.components.hallucination_detector import HallucinationDetector

    calls = []

    def respond(messages):
        calls.append("judge" if "Claims:" in messages[-1].text else "answer")
        return '["no"]' if calls[-1] == "judge" else "Smiljan"

    llm = MockChatGenerator(response_fn=respond)
    detector = HallucinationDetector(chat_generator=llm, judge_spans=False)
    out = SelfCorrectingAnswerer(chat_generator=llm, detector=detector, max_corrections=1).run(query="Where was Tesla born?", documents=DOCS, mode="grounded")
    assert out["exit_reason"] == "span_copied" and out["support"] is None and calls == ["answer"]
    assert out["replies"][0].text.startswith("Smiljan")
