"""Yes/no judgments through an OpenAI-compatible server: P(yes) read from its top log-probabilities of a
one-token reply (ragkit.llm.judgments), a constrained reply where it gives none, and the constrained
JSON replies given room for a server's layout. The server is tests/reliability/fake_openai.py on
127.0.0.1 behind Haystack's real OpenAIChatGenerator; tests/test_llm_server.py does the same against
the real llama-server."""

from __future__ import annotations

import logging
import math

import pytest
from fake_openai import FakeOpenAI
from haystack import Document, Pipeline
from haystack.dataclasses import ChatMessage

from ragkit.components.hallucination_detector import HallucinationDetector
from ragkit.components.reranker import Reranker
from ragkit.config import ModelConfig
from ragkit.llm import judgments
from ragkit.llm.cache import LLMCache, llm_cache
from ragkit.llm.generators import build_chat_generator
from ragkit.llm.judgments import first_token_logprobs, label_probabilities, yes_probability
from ragkit.llm.structured import json_reply_max_tokens
from ragkit.pipeline.trace import RagkitTracer

MESSAGES = [ChatMessage.from_user("Is Smiljan where Tesla was born? Reply yes or no.")]
DOCS = [Document(content="Nikola Tesla was born in Smiljan in 1856."), Document(content="Edison worked in Menlo Park.")]


@pytest.fixture(autouse=True)
def forget_servers_without_logprobs():
    judgments._WITHOUT_LOGPROBS.clear()
    yield
    judgments._WITHOUT_LOGPROBS.clear()


def served(url: str):
    return build_chat_generator(ModelConfig(llm_backend="openai", openai_base_url=url, llm="fake", timeout_s=10.0))


def asked(fake: FakeOpenAI) -> list[dict]:
    return [request for _, request in fake.requests]


def test_p_yes_is_read_from_the_servers_top_logprobs_of_one_token_in_one_call():
    top = {"Yes": math.log(0.6), "No": math.log(0.3), "yes": math.log(0.05), "The": math.log(0.05)}
    with FakeOpenAI(top_logprobs=top) as fake:
        p_yes = yes_probability(served(fake.url("logprobs")), MESSAGES, step="gate")
    assert p_yes == pytest.approx(0.65 / 0.95)  # the labels' words, renormalised: what llama.cpp in-process computes
    (request,) = asked(fake)
    assert request["logprobs"] is True and request["top_logprobs"] == 20 and request["max_tokens"] == 1
    assert "response_format" not in request


def test_a_label_none_of_whose_words_is_listed_gets_at_most_the_least_listed_never_zero():
    top = {"Yes": math.log(0.9), "Sure": math.log(0.01)}
    probs = label_probabilities(top, judgments.YES_NO_WORDS)
    assert probs["yes"] == pytest.approx(0.9 / (0.9 + 3 * 0.01)) and 0 < probs["no"] < 0.05
    assert label_probabilities({"The": -0.1, "I": -3.0}, judgments.YES_NO_WORDS) is None


def test_the_first_tokens_alternatives_are_read_from_what_haystack_keeps_and_nothing_else():
    meta = {"content": [{"token": "Yes", "logprob": -0.2, "top_logprobs": [{"token": "Yes", "logprob": -0.2}, {"token": "No", "logprob": -1.8},
                                                                           {"token": "no", "logprob": float("-inf")}]}]}
    assert first_token_logprobs(meta) == {"Yes": -0.2, "No": -1.8}
    assert first_token_logprobs(None) is None and first_token_logprobs({"content": []}) is None and first_token_logprobs("junk") is None
    # the chosen token alone (a server that ignores top_logprobs): nothing to renormalise against, so no number
    assert first_token_logprobs({"content": [{"token": "Yes", "logprob": -0.3, "top_logprobs": []}]}) is None
    assert first_token_logprobs({"content": [{"token": "Yes", "logprob": -0.3}]}) is None


def test_a_server_without_logprobs_is_asked_once_then_gets_only_constrained_replies_and_the_trace_says_so():
    pipe = Pipeline()
    with FakeOpenAI() as fake:
        generator = served(fake.url("ok"))  # answers, never with log-probabilities
        assert yes_probability(generator, MESSAGES, step="gate") == 1.0  # the fake's constrained choice: its first label, "yes"
        assert [("logprobs" in r, "response_format" in r) for r in asked(fake)] == [(True, False), (False, True)]
        pipe.add_component("check", HallucinationDetector(backend="llm_judge", chat_generator=generator, judge_spans=True))
        with RagkitTracer().collect() as trace:
            out = pipe.run({"check": {"replies": ["Tesla was born in Smiljan."], "documents": DOCS}})["check"]
    assert [("logprobs" in r, "response_format" in r) for r in asked(fake)[2:]] == [(False, True)]  # one call, not two
    assert out["score"] == 1.0 and trace.step("check").decision["p_yes"] == judgments.NO_LOGPROBS and not trace.step("check").fallbacks


def test_no_label_among_the_top_tokens_falls_back_to_a_constrained_reply_and_says_so():
    pipe = Pipeline()
    with FakeOpenAI(top_logprobs={"The": -0.1, "I": -3.0}) as fake:
        pipe.add_component("check", HallucinationDetector(backend="llm_judge", chat_generator=served(fake.url("logprobs")), judge_spans=True))
        with RagkitTracer().collect() as trace:
            out = pipe.run({"check": {"replies": ["Tesla was born in Smiljan."], "documents": DOCS, "query": "Where was Tesla born?"}})["check"]
    assert out["score"] == 1.0  # the one constrained call's yes list (the fake says yes)
    assert "none of ['no', 'yes'] among the server's 2 most likely first tokens" in trace.step("check").decision["p_yes"]
    assert not trace.step("check").fallbacks  # a coarser number, not a failure
    assert [("logprobs" in r, "response_format" in r) for r in asked(fake)] == [(True, False), (False, True)]


def test_the_hallucination_check_reads_each_sentences_p_supported_from_the_server():
    def top(request):  # a server that finds the Smiljan sentence supported and the Paris one not
        claim = request["messages"][-1]["content"]
        return {"Yes": math.log(0.8), "No": math.log(0.2)} if "Smiljan" in claim.split("Answer: ")[-1] else {"Yes": math.log(0.1), "No": math.log(0.9)}

    pipe = Pipeline()
    with FakeOpenAI(top_logprobs=top) as fake:
        pipe.add_component("check", HallucinationDetector(backend="llm_judge", chat_generator=served(fake.url("logprobs")), judge_spans=True))
        with RagkitTracer().collect() as trace:
            out = pipe.run({"check": {"replies": ["Tesla was born in Smiljan. He died in Paris."], "documents": DOCS}})["check"]
    assert [s["p_supported"] for s in out["hallucination"]["sentences"]] == [0.8, 0.1]
    assert out["score"] == pytest.approx(0.1) and out["supported"] is False
    assert trace.step("check").llm_calls == 2 and not trace.step("check").fallbacks
    assert trace.step("check").prompt_tokens_reused == 14  # what the server's prompt cache held, as it says
    assert all(r.get("logprobs") for r in asked(fake))


def test_the_llm_reranker_ranks_by_the_servers_p_yes():
    def top(request):
        passage = request["messages"][-1]["content"]
        return {"Yes": math.log(0.9), "No": math.log(0.1)} if "Smiljan" in passage else {"Yes": math.log(0.2), "No": math.log(0.8)}

    with FakeOpenAI(top_logprobs=top) as fake:
        reranker = Reranker(backend="llm", chat_generator=served(fake.url("logprobs")), fuse_with_retrieval=False)
        out = reranker.run(query="Where was Tesla born?", documents=list(reversed(DOCS)))
    assert "fallback" not in out["reranking"]
    assert [d.content for d in out["documents"]] == [DOCS[0].content, DOCS[1].content]
    assert [round(d.score, 3) for d in out["documents"]] == [0.9, 0.2]


def test_a_failed_call_raises_with_the_endpoint_and_a_cached_read_makes_no_call(tmp_path):
    with FakeOpenAI() as fake:
        with pytest.raises(RuntimeError, match="127.0.0.1"):
            yes_probability(served(fake.url("error")), MESSAGES, step="gate")
        generator = served(fake.url("logprobs"))
        with llm_cache(LLMCache(tmp_path / "cache.sqlite")):
            first = yes_probability(generator, MESSAGES, step="gate")
            calls = len(fake.requests)
            assert yes_probability(generator, MESSAGES, step="gate") == first
        assert len(fake.requests) == calls


def test_haystacks_cut_at_max_tokens_warning_is_not_logged_for_a_one_token_read(caplog):
    with FakeOpenAI() as fake, caplog.at_level(logging.WARNING):
        yes_probability(served(fake.url("logprobs")), MESSAGES, step="gate")
    assert not [r for r in caplog.records if "truncated" in r.getMessage()]


def test_a_servers_json_replies_get_room_for_their_layout_a_grammars_keep_their_budget():
    class FakeOpenAIChatGenerator:  # the backend is told by the class's name
        pass

    assert json_reply_max_tokens(FakeOpenAIChatGenerator(), 4, items=2) == 32  # '{\n  "label": "yes"\n}' is 14 tokens from llama-server
    assert json_reply_max_tokens(FakeOpenAIChatGenerator(), 24, items=5) == 56  # five scores, pretty-printed: 36
    assert json_reply_max_tokens(object(), 24, items=5) == 24
