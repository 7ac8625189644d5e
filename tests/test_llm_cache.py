"""The LLM-response cache: the same model, prompt and decoding answer from SQLite, traced as hits, byte for byte."""

from __future__ import annotations

import pytest
from haystack.dataclasses import ChatMessage

from ragkit.components.guarded_generator import GuardedGenerator
from ragkit.llm.cache import LLMCache, call_key, llm_cache
from ragkit.llm.structured import call_llm
from ragkit.pipeline.trace import RagkitTracer


class CountingLLM:
    """A chat generator that names itself for the cache and counts its calls."""

    def __init__(self, reply: str = "Smiljan [1]."):
        self.reply, self.calls = reply, 0

    def cache_fingerprint(self) -> str:
        return "test:counting"

    def run(self, messages, generation_kwargs=None):
        self.calls += 1
        return {"replies": [ChatMessage.from_assistant(f"{self.reply} ({self.calls})")]}


MESSAGES = [ChatMessage.from_system("Be brief."), ChatMessage.from_user("Where was Tesla born?")]


def test_a_second_identical_call_is_served_from_the_cache_and_traced_as_a_hit(tmp_path):
    from haystack import Pipeline

    llm, cache = CountingLLM(), LLMCache(tmp_path / "cache.sqlite")
    pipe = Pipeline()
    pipe.add_component("answer", GuardedGenerator(chat_generator=llm))
    with llm_cache(cache), RagkitTracer().collect() as trace:
        first = pipe.run({"answer": {"messages": MESSAGES}})["answer"]
        second = pipe.run({"answer": {"messages": MESSAGES}})["answer"]
    assert llm.calls == 1 and first["replies"][0].text == second["replies"][0].text == "Smiljan [1]. (1)"
    assert [(s.llm_calls, s.cache_hits) for s in trace.steps] == [(1, 0), (0, 1)]
    assert cache.stats() == {"hits": 1, "misses": 1, "entries": 1}


def test_the_cache_survives_the_process_and_a_changed_prompt_or_decoding_misses(tmp_path):
    path = tmp_path / "cache.sqlite"
    llm = CountingLLM()
    with llm_cache(LLMCache(path)):
        call_llm(llm, MESSAGES, str, {"max_tokens": 8})
    again = LLMCache(path)  # a new connection, as a later process opens it
    with llm_cache(again):
        assert call_llm(llm, MESSAGES, str, {"max_tokens": 8}).value == "Smiljan [1]. (1)"
        call_llm(llm, MESSAGES, str, {"max_tokens": 9})  # other decoding: a call
        call_llm(llm, [*MESSAGES[:1], ChatMessage.from_user("Where was Tesla born? ")], str, {"max_tokens": 8})  # other prompt
    assert llm.calls == 3 and again.stats()["hits"] == 1


def test_without_an_active_cache_or_a_fingerprint_nothing_is_cached(tmp_path):
    llm = CountingLLM()
    call_llm(llm, MESSAGES, str)
    call_llm(llm, MESSAGES, str)
    assert llm.calls == 2
    with llm_cache(LLMCache(tmp_path / "c.sqlite")):
        class Anonymous(CountingLLM):
            cache_fingerprint = None

        anonymous = Anonymous()
        assert call_key("chat", anonymous, "p", {}) is None
        call_llm(anonymous, MESSAGES, str)
        call_llm(anonymous, MESSAGES, str)
    assert anonymous.calls == 2


def test_an_uncachable_logits_processor_makes_the_call_uncached(tmp_path):
    with llm_cache(LLMCache(tmp_path / "c.sqlite")):
        assert call_key("chat", CountingLLM(), "p", {"logits_processor": [object()]}) is None
        assert call_key("chat", CountingLLM(), "p", {"max_tokens": 4}) is not None


@pytest.mark.integration
@pytest.mark.llm
def test_a_rerun_with_the_cache_makes_no_llm_call_and_gives_the_same_answer(sample_index, fast_config, local_llm, tmp_path):
    from ragkit.pipeline.engine import AgenticRAG
    from ragkit.pipeline.features import Features

    rag = AgenticRAG(Features(grading=True, hallucination_check=True, judge_spans=True, answer_mode="free"), config=fast_config, index=sample_index,
                     chat_generator=local_llm)
    cache = LLMCache(tmp_path / "cache.sqlite")
    with llm_cache(cache):
        first = rag.ask("Where was Nikola Tesla born?")
        second = rag.ask("Where was Nikola Tesla born?")
    assert first.trace.llm_calls >= 2  # grade (a probe), answer (generation); the judge too when the answer claims something
    assert second.trace.llm_calls == 0 and second.trace.cache_hits == first.trace.llm_calls
    assert second.answer == first.answer and second.confidence == first.confidence
    assert any(row.get("cache_hits") for row in second.trace.table())
