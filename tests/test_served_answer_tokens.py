"""A served answer's own token probabilities — the confidence's strongest signals — asked for with the
chat API's ``logprobs``, read from the reply (or a streamed reply's chunks), kept in the LLM cache as their
summary, and on the confidence's signals; a server that sends none leaves them out, as before. The
server is tests/reliability/fake_openai.py on 127.0.0.1 behind Haystack's real OpenAIChatGenerator;
tests/test_llm_server.py compares them with llama.cpp's in-process numbers on the real llama-server."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from fake_openai import FakeOpenAI
from haystack.dataclasses import ChatMessage

from ragkit.config import ModelConfig, RagConfig
from ragkit.llm import judgments, served_logprobs
from ragkit.llm.cache import LLMCache, llm_cache
from ragkit.llm.generators import build_chat_generator
from ragkit.llm.judgments import yes_probability
from ragkit.llm.served_logprobs import served_token_probabilities, token_summary
from ragkit.llm.structured import answer_constraint, call_llm, parse_answer
from ragkit.pipeline.engine import AgenticRAG
from ragkit.pipeline.features import Features

MESSAGES = [ChatMessage.from_user("Source [1]: Nikola Tesla was born in Smiljan.\nQuestion: Where was Tesla born?")]


@pytest.fixture(autouse=True)
def forget_servers():
    yield
    served_logprobs.REFUSES_LOGPROBS.clear()
    judgments._WITHOUT_LOGPROBS.clear()


def served(url: str):
    return build_chat_generator(ModelConfig(llm_backend="openai", openai_base_url=url, llm="fake", timeout_s=10.0))


def test_the_chosen_tokens_probabilities_are_read_from_a_reply_or_a_streamed_replys_chunks():
    reply = {"content": [{"token": "Smil", "logprob": math.log(0.5), "top_logprobs": []}, {"token": "jan", "logprob": math.log(0.8)}]}
    assert served_token_probabilities(reply) == pytest.approx([0.5, 0.8])
    streamed = [{"content": [{"token": "Smil", "logprob": math.log(0.5)}]}, {"content": [{"token": "jan", "logprob": math.log(0.8)}]}, {"content": None}]
    assert served_token_probabilities(streamed) == pytest.approx([0.5, 0.8])
    for nothing in (None, "junk", {"content": []}, {"content": [{"token": "x"}]}, [None, 3]):
        assert served_token_probabilities(nothing) == []
    assert token_summary([0.5, 0.8]) == pytest.approx({"token_p_mean": math.sqrt(0.4), "token_p_min": 0.5, "token_p_first": 0.5, "tokens": 2})
    assert token_summary([]) is None


def test_a_served_answer_asks_for_its_tokens_and_a_cached_one_keeps_their_summary_not_the_list(tmp_path):
    with FakeOpenAI(answer="Smiljan in Croatia [1]", token_probability=0.9, first_token_probability=0.6) as fake:
        generator = served(fake.url("logprobs"))
        kwargs = {"max_tokens": 32, "temperature": 0.0, **answer_constraint(generator)}
        with llm_cache(LLMCache(tmp_path / "cache.sqlite")):
            first = call_llm(generator, MESSAGES, parse_answer, kwargs, step="answer")
            again = call_llm(generator, MESSAGES, parse_answer, kwargs, step="answer")
    (request,) = [r for _, r in fake.requests]  # the second was read from the cache
    assert request["logprobs"] is True and "top_logprobs" not in request
    assert first.ok and first.value == "Smiljan in Croatia [1]"
    assert first.tokens == pytest.approx({"token_p_mean": (0.6 * 0.9 ** 3) ** 0.25, "token_p_min": 0.6, "token_p_first": 0.6, "tokens": 4})
    assert again.tokens == first.tokens and first.logprobs is None and again.logprobs is None


def test_a_server_that_refuses_logprobs_is_asked_again_without_them_and_remembered():
    with FakeOpenAI(answer="Smiljan [1]") as fake:
        generator = served(fake.url("nologprobs"))
        kwargs = {"max_tokens": 32, "temperature": 0.0, **answer_constraint(generator)}
        first = call_llm(generator, MESSAGES, parse_answer, kwargs, step="answer")
        second = call_llm(generator, MESSAGES, parse_answer, kwargs, step="answer")
        p_yes = yes_probability(generator, MESSAGES, step="gate")  # a constrained reply at once: the server is known
    asked = [("logprobs" in r, "response_format" in r) for _, r in fake.requests]
    assert first.ok and second.ok and first.value == second.value == "Smiljan [1]" and first.tokens is None
    assert asked == [(True, False), (False, False), (False, False), (False, True)]  # refused, asked again; then never asked
    assert p_yes == 1.0  # the fake's first label


def remote(url: str) -> RagConfig:
    config = RagConfig(deadline_s=20.0)
    config.models = replace(config.models, llm_backend="openai", openai_base_url=url, llm="fake", timeout_s=10.0)
    return config


@pytest.mark.integration  # the real embedder retrieves; the LLM is the fake server
def test_a_served_free_answers_confidence_reads_its_token_probabilities_a_grounded_draft_gives_none(sample_index):
    """A free answer's tokens are what the confidence's fit reads in-process. A grounded answer through a server is
    asked for a span under a grammar, with each token's alternatives; a reply that is not such a span (this fake
    ignores grammars) is a draft snapped to a source span, whose tokens are not the span's (bench/served_confidence.py)
    and are not read. tests/test_span_grammar.py reads a span's; tests/test_llm_server.py on the real llama-server."""
    question, results = "Where was Nikola Tesla born?", {}
    for name, p, mode in (("sure", 0.99, "free"), ("unsure", 0.3, "free"), ("grounded", 0.99, "grounded")):
        with FakeOpenAI(answer="Smiljan [1]" if mode == "grounded" else "Nikola Tesla was born in Smiljan [1].", token_probability=p) as fake:
            results[name] = AgenticRAG(Features(answer_mode=mode), config=remote(fake.url("logprobs")), index=sample_index).ask(question)
            if mode == "grounded":
                (answer_request,) = [r for _, r in fake.requests if "grammar" in r]
                assert answer_request["top_logprobs"] == 100 and "Smiljan" in answer_request["grammar"]
    with FakeOpenAI() as fake:  # a server that sends no log-probabilities
        results["none"] = AgenticRAG(Features(answer_mode="free"), config=remote(fake.url("ok")), index=sample_index).ask(question)
    assert all(not r.failed and not r.declined and "Smiljan" in r.answer for r in results.values()), {k: (r.answer, r.error) for k, r in results.items()}
    assert results["sure"].details["confidence"]["token_p_min"] == pytest.approx(0.99, abs=1e-3)
    assert results["unsure"].details["confidence"]["token_p_min"] == pytest.approx(0.3, abs=1e-3)
    for name in ("none", "grounded"):  # left to the fit's imputation, as before
        assert "token_p_min" not in results[name].details["confidence"]
    assert results["sure"].confidence > results["none"].confidence > results["unsure"].confidence
