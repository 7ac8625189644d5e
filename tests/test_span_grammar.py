"""A grounded answer through a server: the span rule as a GBNF grammar (ragkit/llm/span_grammar.py).

The grammar's language is finite, so the unit tests list every sentence it allows and compare it with the
spans the rule means; llama.cpp's own parser checks it is GBNF. A grounded answer through the fake OpenAI
server sends it in the request and keeps a reply that is a span; a server that refuses a grammar is asked
again without it and remembered. tests/test_llm_server.py runs it on the real llama-server."""

from __future__ import annotations

import math
import re

import pytest
from fake_openai import FakeOpenAI
from haystack import Document, Pipeline
from haystack.dataclasses import ChatMessage
from llama_cpp import LlamaGrammar

from ragkit.components.guarded_generator import GuardedGenerator
from ragkit.config import ModelConfig
from ragkit.llm import served_logprobs
from ragkit.llm.generators import build_chat_generator
from ragkit.llm.span_grammar import SpanGrammar
from ragkit.llm.structured import answer_constraint, call_llm, parse_answer
from ragkit.pipeline.trace import RagkitTracer, Step

SOURCE = 'Tesla was born in Smiljan, in 1856. He called it "the best year".'


@pytest.fixture(autouse=True)
def forget_servers():
    yield
    served_logprobs.REFUSES_GRAMMAR.clear()
    served_logprobs.REFUSES_LOGPROBS.clear()


def sentences(grammar: str) -> set[str]:
    """Every string the grammar allows (its rules are the module's shapes: a root of 'literal rule'
    alternatives, and rules of '"" | literal rule', '"" | literal' or '""')."""
    rules = dict(line.split(" ::= ", 1) for line in grammar.splitlines())
    literal = r'("(?:[^"\\]|\\.)*")'

    def expand(rule: str) -> set[str]:
        body = rules[rule]
        if body == '""':
            return {""}
        text, nxt = re.fullmatch(r'"" \| ' + literal + r"(?: (\S+))?", body).groups()
        rests = expand(nxt) if nxt else {""}  # no rule after it: the punctuation that ends a clause
        return {""} | {eval(text) + rest for rest in rests}  # noqa: S307 (a JSON string literal from our own grammar)

    root = rules.pop("root")
    alternatives = re.fullmatch(r'" "\? \( (.*) \)', root).group(1).split(" | ")
    spans = set()
    for alternative in alternatives:
        text, nxt = re.fullmatch(literal + r" (\S+)", alternative).groups()
        spans |= {eval(text) + rest for rest in expand(nxt)}  # noqa: S307
    return spans


def test_the_grammar_allows_exactly_the_word_aligned_spans_of_one_clause_not_opening_at_a_function_word():
    grammar = SpanGrammar([SOURCE]).text
    LlamaGrammar.from_string(grammar, verbose=False)  # llama.cpp's parser takes it (quotes and all)
    assert sentences(grammar) == {
        "Tesla", "Tesla was", "Tesla was born", "Tesla was born in", "Tesla was born in Smiljan", "Tesla was born in Smiljan,",  # the clause ends
        "born", "born in", "born in Smiljan", "born in Smiljan,", "Smiljan", "Smiljan,", "1856", "1856.",
        "called", "called it", 'called it "the', 'called it "the best', 'called it "the best year', 'called it "the best year".',  # not "He …"
        "best", "best year", 'best year".', "year", 'year".',
    }


def test_starts_narrow_where_a_span_opens_a_retry_bans_the_rejected_answer_and_an_empty_pool_gives_none():
    smiljan = SOURCE.encode().index(b"Smiljan")
    assert sentences(SpanGrammar([SOURCE], starts={(0, smiljan)}).text) == {"Smiljan", "Smiljan,"}
    tesla_again = sentences(SpanGrammar([SOURCE], banned_prefixes=["tesla was"]).text)
    assert "Tesla" not in tesla_again and "born in Smiljan" in tesla_again
    # starts that open nothing (a function word) fall back to every word start, as the mask does
    the = SOURCE.encode().index(b"in 1856")
    assert "1856" in sentences(SpanGrammar([SOURCE], starts={(0, the)}).text)
    assert SpanGrammar(["", "in the of"]).text is None
    accented = SpanGrammar(["Nikola Tesla était né à Smiljan — en Croatie."]).text
    LlamaGrammar.from_string(accented, verbose=False)
    assert {"né à Smiljan", "en Croatie"} <= sentences(accented)


def grounded_answer(url: str) -> tuple[dict, Step]:
    generator = build_chat_generator(ModelConfig(llm_backend="openai", openai_base_url=url, llm="fake", timeout_s=10.0))
    pipe = Pipeline()
    pipe.add_component("answer", GuardedGenerator(chat_generator=generator, answer_mode="grounded"))
    with RagkitTracer().collect() as trace:
        out = pipe.run({"answer": {"messages": [ChatMessage.from_user("Where was Tesla born?")], "documents": [Document(content=SOURCE)],
                                   "query": "Where was Tesla born?"}})["answer"]
    return out, trace.step("answer")


def test_a_served_grounded_answer_sends_the_span_grammar_and_keeps_a_span_reply():
    with FakeOpenAI(answer="Smiljan") as fake:
        out, step = grounded_answer(fake.url("ok"))
    (request,) = [r for _, r in fake.requests]
    assert "Smiljan" in sentences(request["grammar"]) and request["max_tokens"] == 32  # extra_body lands in the request
    assert out["replies"][0].text == "Smiljan [1]" and out["evidence"]["text"] == "Smiljan"
    assert step.decision["span"] == "copied (a server's grammar)" and not step.fallbacks


def test_a_server_that_refuses_a_grammar_is_asked_again_without_it_and_remembered():
    with FakeOpenAI(answer="He was born in Smiljan.") as fake:
        first, step = grounded_answer(fake.url("nogrammar"))
        second, _ = grounded_answer(fake.url("nogrammar"))
    sent = [r for _, r in fake.requests]
    assert ["grammar" in r for r in sent] == [True, False, False]  # refused once, never sent again
    assert first["replies"][0].text == second["replies"][0].text == "Smiljan [1]"  # the free reply, snapped
    assert first["ok"] and not step.fallbacks and step.llm_calls == 2
    assert "refused by" in step.decision["grammar"] and step.decision["span"] == "snapped to the sources"


def test_a_served_spans_token_probabilities_are_renormalised_over_what_the_grammar_allowed():
    """A server lists its probabilities before the grammar cut the vocabulary; the mask's are after."""
    grammar = SpanGrammar([SOURCE])
    logprobs = {"content": [
        # "The" may not open a span (a function word), "Smil" may, "born" may: Smiljan's share of the allowed
        {"token": "Smil", "logprob": math.log(0.5), "top_logprobs": [{"token": "The", "logprob": math.log(0.3)}, {"token": "born", "logprob": math.log(0.1)}]},
        {"token": "jan", "logprob": math.log(0.9), "top_logprobs": [{"token": "jan", "logprob": math.log(0.9)}, {"token": "ko", "logprob": math.log(0.05)}]},
        # after "Smiljan" the span may end, or keep the comma that ends its clause, not go on past it
        {"token": "", "logprob": math.log(0.6), "top_logprobs": [{"token": ",", "logprob": math.log(0.2)}, {"token": " in", "logprob": math.log(0.15)}]},
    ]}
    assert grammar.token_probabilities(logprobs) == pytest.approx([0.5 / 0.6, 1.0, 0.6 / 0.8])
    tesla = {"content": [  # after "Tesla" the span may end or go on with " was"
        {"token": "Tesla", "logprob": math.log(0.7), "top_logprobs": [{"token": "The", "logprob": math.log(0.2)}]},
        {"token": "", "logprob": math.log(0.6), "top_logprobs": [{"token": " was", "logprob": math.log(0.3)}, {"token": ".", "logprob": math.log(0.05)}]},
    ]}
    assert grammar.token_probabilities(tesla) == pytest.approx([1.0, 0.6 / 0.9])
    two_ends = {"content": [  # two end tokens both render as "": both count
        {"token": "Tesla", "logprob": 0.0, "top_logprobs": [{"token": "Tesla", "logprob": 0.0}]},
        {"token": "", "logprob": math.log(0.6), "top_logprobs": [{"token": "", "logprob": math.log(0.6)}, {"token": "", "logprob": math.log(0.2)}]},
    ]}
    assert grammar.token_probabilities(two_ends) == pytest.approx([1.0, 0.75])
    assert grammar.allows(" Smiljan") and grammar.allows("Smiljan,") and not grammar.allows("Smiljan, in")
    assert grammar.token_probabilities({"content": [{"token": "Paris", "logprob": -0.1, "top_logprobs": [{"token": "Paris", "logprob": -0.1}]}]}) == []
    assert grammar.token_probabilities({"content": [{"token": "Smil", "logprob": -0.1}]}) == []  # no alternatives listed: nothing to read
    assert grammar.token_probabilities(None) == []


def test_a_server_that_refuses_many_alternatives_gets_a_free_draft_and_keeps_its_free_answers_token_probabilities():
    """OpenAI and vLLM list at most 20 alternatives; a span answer's request asks for more (llama-server lists any
    number). The 400 is the span request's, remembered as such: free answers still ask for their tokens."""
    with FakeOpenAI(answer="He was born in Smiljan.") as fake:
        first, step = grounded_answer(fake.url("top20"))
        again, _ = grounded_answer(fake.url("top20"))
        generator = build_chat_generator(ModelConfig(llm_backend="openai", openai_base_url=fake.url("top20"), llm="fake", timeout_s=10.0))
        free = call_llm(generator, [ChatMessage.from_user("Where was Tesla born?")], parse_answer, {"max_tokens": 32, **answer_constraint(generator)})
    sent = [r for _, r in fake.requests]
    assert [("grammar" in r, r.get("top_logprobs")) for r in sent[:3]] == [(True, 100), (False, None), (False, None)]
    assert first["replies"][0].text == again["replies"][0].text == "Smiljan [1]" and not step.fallbacks
    assert sent[3]["logprobs"] is True and free.ok and free.tokens  # the free answer's own tokens, as before
    assert served_logprobs.REFUSES_LOGPROBS == set()


def test_a_span_replys_alternatives_are_slimmed_before_they_are_read_or_cached():
    """The LLM cache keeps a span reply's alternatives to read them again on a hit; 100 a token with their byte
    lists were 110-170 kB an answer. The first 20 (a judgment's read) stay whole; past them, only alternatives
    within e^12 of the chosen token."""
    alternatives = [{"token": f"t{i}", "logprob": -0.1 * i if i < 30 else -20.0 - i, "bytes": [116, i]} for i in range(100)]
    slim = served_logprobs.slim_logprobs({"content": [{"token": "t0", "logprob": 0.0, "bytes": [116], "top_logprobs": alternatives}], "refusal": None})
    (step,) = slim["content"]
    assert [a["token"] for a in step["top_logprobs"]] == [f"t{i}" for i in range(30)] and "bytes" not in step and slim["refusal"] is None
    assert all(set(a) == {"token", "logprob"} for a in step["top_logprobs"])
    streamed = served_logprobs.slim_logprobs([{"content": [{"token": "t0", "logprob": -1.0, "top_logprobs": alternatives[:25]}]}, None])
    assert len(streamed[0]["content"][0]["top_logprobs"]) == 25 and streamed[1] is None  # -2.0 .. -2.4 are within e^12 of -1
    grammar = SpanGrammar([SOURCE])
    full = {"content": [{"token": "Smil", "logprob": math.log(0.5), "top_logprobs": [{"token": "born", "logprob": math.log(0.1)}] * 20
                         + [{"token": "Tesla", "logprob": math.log(0.5) - 13}] * 80}]}
    assert grammar.token_probabilities(served_logprobs.slim_logprobs(full)) == pytest.approx(grammar.token_probabilities(full), rel=1e-3)
